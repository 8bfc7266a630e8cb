"""madara from Python: the functions the ``madara`` verbs call, for a notebook or a script.

    import madara_cli.api as m

    cell = m.run_cell(["strategy=nf", "limit=2"], results="results")    # one cell (a CellResult)
    cells = m.run_grid("demo", ["limit=2"], results="results")           # every cell of a grid
    data = m.evaluate(["strategy=nf,pde"], multirun=True, results="results")  # plain data per cell
    m.table(data)                                                        # ... printed as madara ls cells
    probe = m.probe(["model=smollm2-135m", "benchmark=mini"], results="results")
    decision = m.route(nf=13.9, rho=(0.76, 0.43, 0.08))                  # what MADARA routes to, and why
    frames = m.load("results")                                           # pandas: cells, predictions, probes

Overrides are the command line's (``key=value``, Hydra's grammar); ``results=`` is the
``results_dir=`` override. ``progress=True`` (the default) shows rich bars on a terminal and a
plain text bar in a notebook while a cell or probe runs; ``progress=False`` none. Finished cells,
probes and cached completions are reused exactly as the command line reuses them: it calls these
functions (``madara run``: :func:`configs`, :func:`run_configs`; ``madara probe``: :func:`probe`;
``madara route``: :func:`route`), and ``summary.csv`` holds :func:`cells_frame`'s frame (both
:func:`madara_cli.results.summary.summary_frame`). Errors a user can fix are
:class:`madara_cli.core.errors.ConfigError`, ``DataError`` or ``BackendError`` (ValueErrors or
RuntimeErrors with a one-line message).

See docs/python-api.md for a worked example.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from madara_cli.config.settings import Node, Settings, as_settings
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.runner import Failed
from madara_cli.experiment.walk import CellResult
from madara_cli.results.outputs import ProbeRecord

__all__ = [
    "CellResult", "Failed", "ProbeResult", "Routed", "ResultFrames",
    "compose", "configs", "run_configs", "run", "run_cell", "run_grid", "probe", "route", "evaluate", "table",
    "load", "cells_frame", "predictions_frame", "probes_frame",
]

PathLike = str | Path


def _overrides(overrides: Iterable[str] | str | None, results: PathLike | None) -> list[str]:
    """The overrides as a list, ``results`` as ``results_dir=`` in front (an explicit one among them wins)."""
    from madara_cli.config.overrides import override_value, parse_overrides

    if isinstance(overrides, str):  # one override given bare: "strategy=nf"
        overrides = [overrides]
    out = list(overrides or [])
    if results is not None and not any(o.key == "results_dir" for o in parse_overrides(out)):
        out.insert(0, f"results_dir={override_value(str(results))}")
    return out


def compose(overrides: Iterable[str] | str | None = None, *, results: PathLike | None = None) -> Settings:
    """One cell's config: ``configs/config.yaml`` with the overrides, checked and resolved
    (what ``madara run --cfg job`` prints)."""
    from madara_cli.composition import compose as compose_config

    return compose_config(_overrides(overrides, results))


def _read_config(config: Node | PathLike) -> Settings:
    """A composed config as it is, or one read from YAML and checked as composed ones are (a cell's
    ``config.yaml`` runs that cell again: the same key, so a finished one is reused)."""
    from madara_cli.composition import ensure_loaded
    from madara_cli.config.folders import read_yaml

    ensure_loaded()  # the plug-ins a config names (its backend, strategy, ...): compose() is not what loads them here
    if isinstance(config, Settings):
        return config
    if type(config).__module__.startswith("omegaconf"):  # one composed with OmegaConf: checked as a config.yaml is
        return _checked(as_settings(config), "the config given")
    if not isinstance(config, (str, Path)):
        raise ConfigError(f"config= is a composed config (madara_cli.api.compose(...)) or the path of a cell's config.yaml; "
                          f"got {type(config).__name__}")
    path = Path(config)
    if not path.is_file():
        raise ConfigError(f"no config file at {path} (pass a composed config, or a cell's config.yaml)")
    cfg = read_yaml(path)  # the guarded reader: plain data, no resolver (the file was not typed here)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{path} is not a madara cell config (no model or strategy section); madara run --cfg job prints one")
    return _checked(as_settings(cfg), str(path))


def _checked(cfg: Settings, where: str) -> Settings:
    from madara_cli.config.validate import validate_config

    if "strategy" not in cfg or "model" not in cfg:
        raise ConfigError(f"{where} is not a madara cell config (no model or strategy section); madara run --cfg job prints one")
    validate_config(cfg, ConfigError)
    return cfg


def configs(overrides: Iterable[str] | str | None = None, *, grid: str | None = None, multirun: bool = False,
            config: Node | PathLike | None = None, results: PathLike | None = None) -> list[Settings]:
    """The configs of the cells a run would run: a grid's (``grid=NAME``: every cell of
    configs/grid/NAME.yaml, the overrides applied to each), a sweep's (``multirun``:
    comma-separated values expand), one config (``config``: a composed config or a
    config.yaml; ``results`` then sets its results folder) or one composed from the overrides."""
    from madara_cli.experiment.grid import expand, expand_sweep, has_sweep

    given = _overrides(overrides, results)
    if config is not None:
        if grid or multirun or _overrides(overrides, None):
            raise ConfigError("config= runs that one config: pass no overrides, grid or multirun with it")
        cfg = _read_config(config)
        return [cfg if results is None else cfg.replace(results_dir=str(results))]
    if grid:
        return expand(grid, given)
    if multirun:
        return expand_sweep(given)
    if has_sweep(given):
        raise ConfigError("comma-separated values sweep: add -m/--multirun (madara run -m strategy=nf,pde; in Python multirun=True), "
                          "or quote a literal list as key=[a,b]")
    return [compose(given)]


def run_configs(cfgs: Sequence[Node], *, progress: Any = None, keep_going: bool = False, summary: bool = True) -> list[CellResult | Failed]:
    """Run the cells in order, one engine per model (finished cells are read back, not
    rerun); ``keep_going``: a cell whose data or engine is unavailable becomes a
    :class:`Failed` and the rest go on. ``summary`` writes each results folder's
    ``summary.csv`` after. No folder is left empty when a run stops early."""
    from madara_cli.experiment.runner import run_cells
    from madara_cli.results.record_files import no_empty_folders_left
    from madara_cli.results.summary import write_summary

    with no_empty_folders_left({str(c.results_dir) for c in cfgs}):
        done = run_cells(list(cfgs), progress, keep_going=keep_going)
    if summary:
        for folder in dict.fromkeys(str(c.results_dir) for c in cfgs):
            write_summary(folder)
    return done


@contextmanager
def _showing(progress: Any) -> Iterator[Any]:
    """The progress a call shows: ``True`` :func:`~madara_cli.core.progress.auto_progress`, ``False``/None none, else the one given."""
    if progress is True:
        from madara_cli.core.progress import auto_progress

        with auto_progress() as shown:
            yield shown
    else:
        yield progress or None


def run(overrides: Iterable[str] | str | None = None, *, grid: str | None = None, multirun: bool = False,
        config: Node | PathLike | None = None, results: PathLike | None = None, progress: Any = True,
        keep_going: bool = False) -> list[CellResult | Failed]:
    """Run a cell, a sweep or a grid (see :func:`configs`): ``madara run``."""
    cfgs = configs(overrides, grid=grid, multirun=multirun, config=config, results=results)
    with _showing(progress) as shown:
        return run_configs(cfgs, progress=shown, keep_going=keep_going)


def run_cell(overrides: Iterable[str] | str | None = None, *, config: Node | PathLike | None = None,
             results: PathLike | None = None, progress: Any = True) -> CellResult:
    """Run one cell from overrides or a config and return it (``.record``: metrics,
    accounting, provenance; ``.folder``; ``.skipped`` when it was finished before)."""
    (done,) = run(overrides, config=config, results=results, progress=progress)
    return done


def evaluate(overrides: Iterable[str] | str | None = None, *, grid: str | None = None, multirun: bool = False,
             config: Node | PathLike | None = None, results: PathLike | None = None, progress: Any = True,
             keep_going: bool = False) -> dict[str, Any]:
    """Run what :func:`run` runs and return plain data (lists, dicts, numbers): ``results``,
    one entry per cell by its key, each with its EM, F1 and contains in percent with their
    95% intervals (``em_ci95``, ...), ``health`` and ``health_reason``, ``route`` (a madara
    cell's), the requests (sent + cached + repeated), wall and engine seconds, ``n`` and
    its folder (what ``madara ls cells --json`` prints); ``failed``: {cell: why} with
    ``keep_going``. :func:`table` prints it."""
    from madara_cli.results.summary import cell_result

    done = run(overrides, grid=grid, multirun=multirun, config=config, results=results, progress=progress, keep_going=keep_going)
    return {"results": {d.record.key: cell_result(d.record, d.folder) for d in done if not isinstance(d, Failed)},
            "failed": {d.label: d.reason for d in done if isinstance(d, Failed)}}


def table(data: dict[str, Any] | Sequence[dict[str, Any]], width: int = 100) -> None:
    """Print :func:`evaluate`'s results (or a list of its rows) as ``madara ls cells``
    does: one line per cell within ``width`` columns, with intervals and health."""
    from rich.console import Console

    from madara_cli.results.summary import cells_table

    rows = list(data["results"].values()) if isinstance(data, dict) else list(data)
    Console(width=width).print(cells_table(rows))


def run_grid(name: str, overrides: Iterable[str] | str | None = None, *, results: PathLike | None = None, progress: Any = True,
             keep_going: bool = False) -> list[CellResult | Failed]:
    """Run every cell of ``configs/grid/NAME.yaml`` (``madara run --grid NAME``)."""
    return run(overrides, grid=name, results=results, progress=progress, keep_going=keep_going)


@dataclass(frozen=True)
class ProbeResult:
    """A finished RSC probe: the record (``.route``, ``.reason``, ``.rsc_class``,
    ``.rho_at(0)``, ``.em_nf`` a fraction), where it lives, and whether it was reused."""

    record: ProbeRecord
    path: Path
    reused: bool


def probe(overrides: Iterable[str] | str | None = None, *, model: str | None = None, benchmark: str | None = None,
          n: int | None = None, force: bool = False, results: PathLike | None = None, progress: Any = True) -> ProbeResult:
    """Diagnose a model-task pair (``madara probe``): NF on the calibration queries, the
    RSC probe, and the route. ``model`` and ``benchmark`` are the same as the overrides
    ``model=`` and ``benchmark=`` (an override given as well wins); ``n`` calibration
    queries (default: ``benchmark.calibration``); ``force`` recomputes a finished probe
    (completions still come from the cache)."""
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.walk import ensure_probe
    from madara_cli.results.record_files import no_empty_folders_left
    from madara_cli.results.tracking import preflight

    given = _overrides(overrides, results)
    named = [f"{key}={value}" for key, value in (("model", model), ("benchmark", benchmark)) if value is not None]
    cfg = compose([*named, *given])  # the later override of a key wins, so model= among the overrides beats model=
    if n is not None and n < 1:
        raise ConfigError(f"n={n}: a probe needs at least one calibration query")
    preflight([cfg])  # a tracker that cannot be used: one line now, before the engine starts
    with _showing(progress) as shown, no_empty_folders_left([str(cfg.results_dir)]), EnginePool(progress=shown) as pool:
        if shown is not None:
            shown.label = f"probe {cfg.model.name}/{cfg.benchmark.name}"
        record, path, reused = ensure_probe(cfg, pool, n, force=force)
    return ProbeResult(record, Path(path), reused)


@dataclass(frozen=True)
class Routed:
    """A routing decision (``strategy``, ``reason``), with what the NF-only policy (and,
    given an entropy, the entropy policy) would pick for comparison."""

    strategy: str
    reason: str
    nf_only: str
    by_entropy: str | None
    policy: str
    iso_note: str = ""  # set when the isolation policy had no measurement and routed as the paper's


def check_nf_percent(nf: float) -> None:
    """An NF EM in percent, refusing one that reads as a fraction: metrics.json and
    probe.json store fractions (0.45), the router reads percent (45), and 0.45 taken as
    0.45% would route to PDE without a word. A true NF below 1% routes as 0 does."""
    if not isinstance(nf, (int, float)) or isinstance(nf, bool) or not math.isfinite(nf):
        raise ConfigError(f"nf={nf!r} is not a number")
    if not 0.0 <= nf <= 100.0:
        raise ConfigError(f"nf is an EM percentage in [0, 100]; got {nf:g}")
    if 0.0 < nf <= 1.0:
        raise ConfigError(f"nf={nf:g} reads as a fraction (as cell and probe records store it: {nf:g} is {100 * nf:g}%); "
                          f"the router takes percent: nf={100 * nf:g} (an NF under 1% routes as nf=0 does)")


def route(nf: float, rho: Sequence[float] | None = None, *, degenerate: bool = False, rsc_class: str | None = None,
          entropy: float | None = None, tau_nf: float = 30.0, rho1: float = 0.5, policy: str = "paper",
          iso_em: float | None = None, iso_n: int | None = None) -> Routed:
    """What MADARA routes a model-task pair to, from its diagnostics alone (``madara
    route``): ``nf`` the No-Filter EM in percent (a fraction such as 0.45 is refused),
    ``rho`` the probe's (ρ̂1, ρ̂2, ρ̂3), or ``degenerate=True`` for a probe whose scores
    were degenerate (no ρ̂): one of the two is required. ``policy``: ``paper``
    (Algorithm 2) or ``isolation`` (madara's, with ``iso_em`` PDE-Random EM in percent
    on ``iso_n`` queries)."""
    from madara_cli.diagnose import router

    if policy not in router.POLICIES:
        raise ConfigError(f"policy {policy!r} is not a routing policy; valid: {', '.join(router.POLICIES)}")
    check_nf_percent(nf)
    if rho is None and not degenerate:
        raise ConfigError("routing needs the probe's three ρ̂ (rho=(r1, r2, r3)), or degenerate=True for a probe whose scores "
                          "were degenerate (it measured no ρ̂)")
    if rho is not None and degenerate:
        raise ConfigError("rho and degenerate contradict each other: a degenerate probe measured no ρ̂; give one of them")
    if rho is not None:
        what = "rho is three Spearman correlations in [-1, 1] (shuffled, contradicted, random); got "
        rho = tuple(_number(x, f"{what}{rho!r}") for x in (rho if isinstance(rho, Sequence) and not isinstance(rho, str) else [rho]))
        if len(rho) != 3 or any(not -1.0 <= x <= 1.0 for x in rho):  # a NaN is no correlation either
            raise ConfigError(what + " ".join(f"{x:g}" for x in rho))
    # the command line's ranges (madara route's --entropy, --tau-nf, --rho1, --iso-n)
    for name, value, lo, hi in (("entropy", entropy, 0.0, 1.0), ("tau_nf", tau_nf, 0.0, 100.0), ("rho1", rho1, -1.0, 1.0)):
        what = f"{name} is in [{lo:g}, {hi:g}]; got {value!r}"
        if value is not None and not lo <= _number(value, what) <= hi:
            raise ConfigError(what)
    if iso_n is not None and (isinstance(iso_n, bool) or not isinstance(iso_n, int) or iso_n < 1):
        raise ConfigError(f"iso_n is how many queries iso_em was measured on: an integer >= 1; got {iso_n!r}")
    try:
        diag = router.Diagnostics(em_nf=float(nf), rho=rho, rsc_class=rsc_class, entropy=entropy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if (iso_em is None) != (iso_n is None):
        raise ConfigError("the isolation gain needs both iso_em (PDE-Random EM, percent) and iso_n (queries); --iso-em and --iso-n")
    iso, note = None, ""
    if iso_em is not None:
        if not 0.0 <= _number(iso_em, f"iso_em is an EM percentage; got {iso_em!r}") <= 100.0:
            raise ConfigError(f"iso_em is an EM percentage in [0, 100]; got {iso_em:g}")
        iso = router.Isolation.from_published(float(nf), iso_em, iso_n, "given")
    elif policy == router.ISOLATION:
        note = "no --iso-em/--iso-n: the isolation policy has no measurement and routes as the paper's"
    thresholds = router.Thresholds(tau_nf=tau_nf, rho1=rho1)
    try:
        decision = router.route_policy(policy, diag, iso, thresholds)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Routed(decision.strategy, decision.reason, router.route_nf_only(diag, tau_nf).strategy,
                  router.route_entropy(diag).strategy if entropy is not None else None, policy, note)


def _number(value: Any, what: str) -> float:
    """A number as the router reads it; anything else (a word, None, a bool) is ConfigError ``what`` (a NaN passes; no range holds it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(what)
    return float(value)


@dataclass(frozen=True)
class ResultFrames:
    """A results folder as three DataFrames: ``cells`` (one row per finished cell, the
    columns of summary.csv), ``predictions`` (one row per cell and query) and ``probes``
    (one row per RSC probe)."""

    cells: Any
    predictions: Any
    probes: Any


def _folder(results: PathLike) -> Path:
    root = Path(results)
    if not root.is_dir():
        raise ConfigError(f"no results folder at {root} (run something first)")
    return root


def cells_frame(results: PathLike = "results"):
    """One row per finished cell: exactly the rows and columns of ``summary.csv`` (key
    parts, ``route`` for a madara cell, n, the rates in percent with EM's Wilson 95%
    interval, accounting, seconds, the key's settings, provenance)."""
    from madara_cli.results.summary import summary_frame

    return summary_frame(_folder(results))


PREDICTION_KEYS = ("grid", "model", "benchmark", "strategy", "key")


def predictions_frame(results: PathLike = "results"):
    """One row per cell and query: the cell's ``grid, model, benchmark, strategy, key``,
    then the query's row of predictions.jsonl (``id``, ``question``, ``answers``,
    ``prediction``, ``em``, ``em_strict``, ``f1``, ``contains`` as 0-1 per query, ...;
    ``route`` for a madara cell). Unreadable folders are left out, as the tables leave them."""
    import pandas as pd

    from madara_cli.results.stored import load_results

    rows = []
    for cell in load_results(_folder(results)).cells:
        head = {"grid": cell.grid, "model": cell.model, "benchmark": cell.benchmark, "strategy": cell.strategy, "key": cell.key}
        for p in cell.predictions() or ():
            extra = p.get("extra") if isinstance(p.get("extra"), dict) else {}
            row = {**head, **{k: v for k, v in p.items() if k not in head and k != "extra"}}
            if "route" in extra:
                row["route"] = extra["route"]
            rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else [*PREDICTION_KEYS, "id", "em"])


PROBE_COLUMNS = ("model", "benchmark", "n", "em_nf_pct", "rho1", "rho2", "rho3", "rho_star", "rho_bar", "rsc_class", "coupling",
                 "degenerate", "route", "reason", "key", "path")


def probes_frame(results: PathLike = "results"):
    """One row per RSC probe: the pair, n, the calibration NF EM in percent, ρ̂1..3, ρ*,
    ρ̄, class, coupling, whether the scores were degenerate, the route and its reason."""
    import pandas as pd

    from madara_cli.results.stored import load_results

    rows = []
    for p in load_results(_folder(results)).probes:
        rows.append({
            "model": p.model, "benchmark": p.benchmark, "n": p.n, "em_nf_pct": None if p.em_nf is None else 100 * p.em_nf,
            "rho1": p.rho_at(0), "rho2": p.rho_at(1), "rho3": p.rho_at(2), "rho_star": p.rho_star, "rho_bar": p.rho_bar,
            "rsc_class": p.rsc_class, "coupling": p.coupling, "degenerate": p.is_degenerate, "route": p.route, "reason": p.reason,
            "key": p.key, "path": None if p.path is None else str(p.path.parent),
        })
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS))


def load(results: PathLike = "results") -> ResultFrames:
    """A results folder as DataFrames (:class:`ResultFrames`); reads, never runs."""
    return ResultFrames(cells_frame(results), predictions_frame(results), probes_frame(results))
