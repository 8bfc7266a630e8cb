"""MADARA (Algorithm 2): calibrate, then treat.

Phase 1 reuses the finished probe of this (model, benchmark, calibration size,
settings) or runs it now on the calibration split (disjoint from the evaluated
queries); ``strategy.probe=PATH`` pins a specific probe record (``madara probe``
writes them). Phase 2 runs the routed treatment (PDE, SDA, CoT or ATF, with its own
``configs/strategy`` settings) on every evaluated query. The route and its reason go
into the cell's report (``madara``) and each prediction's ``extra``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from omegaconf import OmegaConf

from madara_cli.config import strategy_node, strategy_schema
from madara_cli.records import Example, Prediction
from madara_cli.results.records import ROUTE_FIELDS, ProbeRecord
from madara_cli.strategies.base import STRATEGIES, StrategyContext


def routed_config(cfg, strategy: str):
    """The whole config with ``strategy`` swapped for the routed one's own config.

    Settings the user changed on the madara strategy (``strategy.scoring=logprob``,
    ``strategy.top_k=3``, ...) carry over to the treatment, except ``scoring`` for the
    CoT treatments, whose reasoning must be generated."""
    node = strategy_node(strategy)
    defaults = OmegaConf.structured(strategy_schema("madara"))
    for key in defaults:
        if key in ("name", "probe") or key not in node or (key == "scoring" and node.cot):
            continue
        if key in cfg.strategy and cfg.strategy[key] != defaults[key]:
            node[key] = cfg.strategy[key]
    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    new.strategy = node
    return new


@STRATEGIES.register("madara")
def madara(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    from madara_cli.diagnose.probe import find_or_run_probe

    if ctx.strategy.probe:
        record = read_probe(Path(ctx.strategy.probe))
        path, reused = record.path or Path(ctx.strategy.probe), True
    else:
        record, path, reused = find_or_run_probe(ctx.cfg, ctx.llm)
    route = record.route
    sub = StrategyContext(llm=ctx.llm, cfg=routed_config(ctx.cfg, route))
    preds = STRATEGIES.get(route)(sub, examples)
    ctx.report.update(sub.report)
    ctx.report["madara"] = {
        "route": route,
        "reason": record.reason,
        "probe": _relative(path, ctx.cfg.results_dir),
        "probe_reused": reused,
        "em_nf_calibration": record.em_nf,
        "rsc_class": record.rsc_class,
        "rho": record.rho,
    }
    return [replace(p, extra={**p.extra, "route": route}) for p in preds]


def read_probe(path: Path) -> ProbeRecord:
    """The finished probe named by ``strategy.probe`` (its folder or its file); one-line errors otherwise."""
    from madara_cli.config import ConfigError
    from madara_cli.data.loaders import DataError
    from madara_cli.results import store

    try:
        record = store.read_probe(path, require=ROUTE_FIELDS)  # a probe folder or its file
    except store.RecordError as e:
        raise DataError(f"strategy.probe: {e}") from None
    if record is None:
        raise ConfigError(f"strategy.probe: no probe file at {path}")
    if record.route not in STRATEGIES:
        raise DataError(f"strategy.probe: {path} routes to unknown strategy '{record.route}'")
    return record


def _relative(path: Path, results_dir) -> str:
    """The probe's path relative to the results folder when inside it, so the cell's
    record does not depend on where the results folder lives."""
    try:
        return str(Path(path).resolve().relative_to(Path(str(results_dir)).resolve()))
    except ValueError:
        return str(path)
