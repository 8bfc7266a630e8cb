"""MADARA (Algorithm 2): diagnose, route, treat; what ``strategy=madara`` runs.

1. **Probe**: the finished RSC probe of this (model, benchmark, calibration size, settings)
   is reused, or run now on the calibration split (:func:`~madara_cli.experiment.examples.prepare_probe`:
   the first ``benchmark.calibration`` queries of the seeded order, nested in or disjoint
   from the evaluated ones); ``strategy.probe=PATH`` pins a finished probe.
2. **Route**: the probe's route (:mod:`madara_cli.diagnose.router`, the only routing rule).
3. **Treat**: the routed strategy (PDE, SDA, CoT or ATF), its own ``configs/strategy``
   settings composed by Hydra (:func:`routed_config`), on every evaluated query.

:meth:`Treatment.prepare`, at the cell's start and before its engine is taken (the
calibration split may need the reranker's engine), works out which ``strategy.X`` the user
set (one compose of madara's node); the routed node is composed once in :meth:`Treatment.run`,
since only the route names it. ``run`` runs inside the cell's accounting, so a probe run for
the cell counts in its cost. The route and reason go into the record (``madara``) and each
prediction's ``extra["route"]``. Strategies never call up here: ``strategies/`` is pure treatments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from madara_cli.config.identity import ProbeIdentity
from madara_cli.config.settings import Node, Settings
from madara_cli.core.records import Example, Prediction
from madara_cli.diagnose.probe import find_or_run_probe, routed
from madara_cli.experiment.examples import CellExamples, prepare_probe
from madara_cli.plugins.catalog import CATALOG
from madara_cli.results import record_files
from madara_cli.results.outputs import ROUTE_FIELDS, ProbeRecord
from madara_cli.strategies import StrategyContext, StrategySpec, strategy_fn
from madara_cli.strategies.context import EngineSource, StrategyFn

if TYPE_CHECKING:
    from madara_cli.experiment.engines import EnginePool

# Settings of the madara node itself, never carried to the treatment.
_OWN = ("name", "probe")


def track_probe(cfg: Settings, record: ProbeRecord, path: Path, reused: bool) -> None:
    """Log a finished probe to ``cfg.logger``'s tracker (once per probe key)."""
    from madara_cli.results.tracking import probe_run, track

    track(cfg, lambda: probe_run(Path(path).parent, record, cfg), replace=not reused and bool(cfg.get("force")))


def user_strategy_keys(cfg: Settings) -> set[str]:
    """The ``strategy.X`` settings the user changed on the madara cell: those differing from madara's
    composed node (one spelt out at its default changes neither the key nor what may run)."""
    from madara_cli.composition import compose

    base = compose([f"strategy={cfg.strategy.name}"]).strategy
    return {k for k in cfg.strategy if k not in base or cfg.strategy[k] != base[k]} - set(_OWN)


def routed_config(cfg: Settings, route: str, carry: set[str] | None = None) -> Settings:
    """The cell's config with its strategy node the routed strategy's, composed from the cell's own
    overrides with ``strategy=route``. The user's ``strategy.X`` settings (``carry``: their
    :func:`user_strategy_keys`, if worked out) carry over where the routed node has them, except
    ``scoring`` for the CoT treatments (their reasoning must be generated); all else is the cell's."""
    from madara_cli.composition import compose
    from madara_cli.config.overrides import parse_overrides

    parsed = parse_overrides(str(o) for o in cfg.get("overrides") or [])
    others = [o.raw for o in parsed if not (o.hydra.key_or_group == "strategy" or o.hydra.key_or_group.startswith("strategy."))]
    node = compose([*others, f"strategy={route}"]).strategy
    kept = {key: cfg.strategy[key] for key in sorted(carry if carry is not None else user_strategy_keys(cfg))
            if key in node and key in cfg.strategy and not (key == "scoring" and node.get("cot"))}
    return cfg.replace(strategy=node.replace(**kept))


@dataclass
class Treatment:
    """One ``madara`` cell's probe, ready to route: a pinned one (``strategy.probe``), or the calibration
    examples to run it on if not on disk yet (else None: the finished probe is read when the cell runs)."""

    pinned: tuple[ProbeRecord, Path] | None = None
    calibration: list[Example] | None = None
    spec: ProbeIdentity | None = None  # the probe's, derived once in prepare (None with a pinned probe)
    carry: set[str] | None = None  # the strategy.X settings the user set, carried to the treatment (user_strategy_keys)

    @classmethod
    def prepare(cls, cfg: Settings, pool: EnginePool | None, calibration: list[Example] | None = None,
                reranker: Node | None = None) -> "Treatment":
        """Before the cell's engine is taken: read a pinned probe, or retrieve the calibration split a probe
        still to run needs (``calibration``: the split as the cell loaded it, None loads it; ``reranker``:
        the cell's :func:`~madara_cli.experiment.examples.reranker_config`)."""
        carry = user_strategy_keys(cfg)
        if cfg.strategy.get("probe"):
            path = Path(str(cfg.strategy.probe))
            record = read_probe(path)
            return cls(pinned=(record, record.path or path), carry=carry)
        given = None if calibration is None else (lambda *_a: CellExamples(list(calibration), list(calibration), None))  # type: ignore[arg-type]
        probe = prepare_probe(cfg, pool, load=given, reranker=reranker)  # the probe's walk, on the split the cell loaded
        return cls(calibration=probe.examples, spec=probe.ident, carry=carry)

    def run(self, ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
        """Probe (or reuse), route, and run the routed strategy: a strategy's signature."""
        if self.pinned is not None:
            (record, path), reused = self.pinned, True
        else:
            record, path, reused = find_or_run_probe(ctx.cfg, ctx.llm, examples=self.calibration, spec=self.spec)
            track_probe(ctx.cfg, record, path, reused)
        route, reason = routed(record, ctx.cfg)
        sub = StrategyContext(llm=ctx.llm, cfg=routed_config(ctx.cfg, route, self.carry))
        preds = strategy_fn(route)(sub, examples)
        ctx.report.update(sub.report)
        ctx.report["madara"] = {
            "route": route,
            "reason": reason,
            "probe": _relative(path, ctx.cfg.results_dir),
            "probe_reused": reused,
            "em_nf_calibration": record.em_nf,
            "rsc_class": record.rsc_class,
            "rho": record.rho,
            **({"policy": str(ctx.cfg.router.policy)} if str(ctx.cfg.router.policy) != "paper" else {}),
            **({"isolation_gain": record.isolation.gain, "isolation_p": record.isolation.p_value} if record.isolation else {}),
        }
        return [replace(p, extra={**p.extra, "route": route}) for p in preds]


def strategy_for(spec: StrategySpec, cfg: Settings, engines: EngineSource | None, calibration: list[Example] | None,
                 reranker: Node | None) -> StrategyFn:
    """What runs a cell of ``spec``, before its engine is taken: a routed strategy's probe ready to route
    (Diagnose -> Treat), a plug-in's prepare step's result, or its run function."""
    if spec.routed:
        return Treatment.prepare(cfg, engines, calibration, reranker=reranker).run  # type: ignore[arg-type]
    if spec.prepare is not None:
        return spec.prepare(cfg, engines, calibration, reranker)
    assert spec.run is not None
    return spec.run


def read_probe(path: Path) -> ProbeRecord:
    """The finished probe named by ``strategy.probe`` (its folder or its file); one-line errors otherwise."""
    from madara_cli.core.errors import ConfigError, DataError, RecordError

    try:
        record = record_files.read_probe(path, require=ROUTE_FIELDS)
    except RecordError as e:
        raise DataError(f"strategy.probe: {e}") from None
    if record is None:
        raise ConfigError(f"strategy.probe: no probe file at {path}")
    if CATALOG.find("strategy", record.route) is None:
        raise DataError(f"strategy.probe: {path} routes to unknown strategy '{record.route}'")
    return record


def _relative(path: Path, results_dir) -> str:
    """The probe's path relative to the results folder when inside it: the record does not depend on where that lives."""
    try:
        return str(Path(path).resolve().relative_to(Path(str(results_dir)).resolve()))
    except ValueError:
        return str(path)
