"""MADARA (Algorithm 2): calibrate, then treat.

Phase 1 reuses the finished probe of this (model, benchmark, calibration size,
settings) or runs it now on the calibration split (disjoint from the evaluated
queries); ``strategy.probe=PATH`` pins a specific probe.json. Phase 2 runs the
routed treatment (PDE, SDA, CoT or ATF, with its own ``configs/strategy`` settings)
on every evaluated query. The route and its reason go into ``metrics.json``
(``madara``) and each prediction's ``extra``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

from madara_cli.config import StrategyConfig, find_config
from madara_cli.records import Example, Prediction
from madara_cli.strategies.base import STRATEGIES, StrategyContext


def routed_config(cfg, strategy: str):
    """The whole config with ``strategy`` swapped for the routed one's own config.

    Settings the user changed on the madara strategy (``strategy.scoring=logprob``,
    ``strategy.top_k=3``, ...) carry over to the treatment, except ``scoring`` for the
    CoT treatments, whose reasoning must be generated."""
    node = OmegaConf.merge(OmegaConf.structured(StrategyConfig), OmegaConf.load(find_config("strategy", strategy)))
    defaults = OmegaConf.structured(StrategyConfig)
    for key in StrategyConfig.__dataclass_fields__:
        if key in ("name", "probe") or (key == "scoring" and node.cot):
            continue
        if key in cfg.strategy and cfg.strategy[key] != defaults[key]:
            node[key] = cfg.strategy[key]
    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    new.strategy = node
    return new


@STRATEGIES.register("madara")
def madara(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    from madara_cli.probe import find_or_run_probe

    if ctx.strategy.probe:
        path = Path(ctx.strategy.probe)
        if not path.is_file():
            raise ValueError(f"strategy.probe: no probe file at {path}")
        record, reused = json.loads(path.read_text()), True
    else:
        record, path, reused = find_or_run_probe(ctx.cfg, ctx.llm)
    route = record["route"]
    sub = StrategyContext(llm=ctx.llm, cfg=routed_config(ctx.cfg, route))
    preds = STRATEGIES.get(route)(sub, examples)
    ctx.report.update(sub.report)
    ctx.report["madara"] = {
        "route": route,
        "reason": record["reason"],
        "probe": str(path),
        "probe_reused": reused,
        "em_nf_calibration": record["em_nf"],
        "rsc_class": record["rsc_class"],
        "rho": record.get("rho"),
    }
    return [replace(p, extra={**p.extra, "route": route}) for p in preds]
