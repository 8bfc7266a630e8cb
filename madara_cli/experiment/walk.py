"""One walk of a cell through the pipeline, written once for ``madara run``, ``madara plan``,
the probe and ``madara bench``:

    identify -> finished? -> load -> size to the data (identify again if cut) -> retrieve
    -> what runs (a strategy's run function, its prepare step, or madara's probe and route)

:func:`prepare_cell` walks up to where an engine answers: the runner then runs the strategy
and writes the record, ``madara plan`` runs it on an engine that records the requests.
:func:`prepare_probe` (:mod:`.examples`) is the walk of a probe. Only a reranker's retrieval
and a madara cell's probe send requests here (through the ``engines`` given). A plan's
engines do not answer (``answers = False``): a reranker then ranks with its first stage (a
ranking from placeholders would be frozen in the snapshot), and the plan passes its own
``load`` (each benchmark once a grid) or its placeholder queries as ``loaded``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from madara_cli.config.identity import Cell, CellIdentity, identify
from madara_cli.config.keys import standing, strategy_impl
from madara_cli.config.settings import Settings
from madara_cli.core.records import Example
from madara_cli.experiment.examples import (  # noqa: F401  (PreparedProbe, prepare_probe: the walk of a probe, beside the cell's)
    CellExamples,
    Load,
    PreparedProbe,
    load_cell,
    prepare_probe,
    reranker_config,
    retrieve_for,
    sized_to_data,
)
from madara_cli.experiment.treat import strategy_for
from madara_cli.plugins.catalog import CATALOG
from madara_cli.results.outputs import CellRecord
from madara_cli.results.record_files import read_cell
from madara_cli.strategies.context import EngineSource, StrategyFn

log = logging.getLogger(__name__)


@dataclass
class CellResult:
    cell: Cell
    folder: Path
    record: CellRecord
    skipped: bool = False  # finished earlier; read from disk
    found_as: str | None = None  # the key it was finished under, when that is an earlier one (SHIMS content_keyed_inputs)

    @property
    def metrics(self) -> dict[str, Any]:
        """The record as it is stored (a plain dict)."""
        return self.record.to_dict()


def finished_cell(cfg: Settings, sized: bool = False, ident: CellIdentity | None = None) -> CellResult | None:
    """The cell's finished result on disk, or None. One finished under a key from before keys moved
    stands for it when its record shows it read the same inputs (SHIMS ``content_keyed_inputs``);
    one that cannot show it is said in one line and runs anew (its old folder stays). ``sized``:
    a cell whose limit or calibration the data cut is looked for under the key it ran as (which
    loads the benchmark). ``ident``: ``identify(cfg)`` when the caller has it."""
    ident = ident if ident is not None else identify(cfg)
    folder = ident.folder(cfg.results_dir)
    record = read_cell(folder)
    if record is not None:
        return CellResult(ident.cell, folder, record, skipped=True)
    for old in ident.legacy:
        old_folder = old.folder(cfg.results_dir)
        record = read_cell(old_folder)
        if record is None:
            continue
        why = standing(record.provenance, ident.evidence)
        if why is None:
            log.info("%s: finished earlier under its key before inputs were keyed by content, %s", ident.key, old.key)
            return CellResult(ident.cell, old_folder, record, skipped=True, found_as=old.key)
        from madara_cli.data.splits import warn

        warn(f"{old.key} was finished before inputs were keyed by content, and {why}: the cell runs anew as {ident.key}")
    if sized:
        from madara_cli.core.errors import DataError

        try:
            fitted, requested = sized_to_data(cfg, load_cell(cfg))
        except DataError:  # its data is not here: then it has not run either
            return None
        if requested:
            return finished_cell(fitted)
    return None


@dataclass
class PreparedCell:
    """A cell walked up to its engine: its config as it runs (sized to the data), identity, evaluated
    queries retrieved, calibration split as loaded, what the loader kept and dropped, what runs it."""

    cfg: Settings
    ident: CellIdentity
    examples: list[Example]
    calibration: list[Example] | None
    strategy: StrategyFn
    data: dict[str, Any] | None = None
    requested: dict[str, int] = field(default_factory=dict)


def prepare_cell(cfg: Settings, engines: EngineSource | None, examples: list[Example] | None = None,
                 loaded: CellExamples | None = None, force: bool | None = None,
                 before_work: Callable[[CellIdentity], None] | None = None, load: Load = load_cell) -> CellResult | PreparedCell:
    """Walk a cell up to its engine: its finished result when it has one (and ``force``, default
    ``cfg.force``, is off), else what runs it. ``examples``: queries already retrieved (``madara
    bench``); ``loaded``: the benchmark as :func:`load_cell` gives it, when the caller has it (a
    plan's placeholders); ``load``: how it loads otherwise, after the finished check (a plan loads
    each once); ``before_work``: called with the identity once the cell must run, before any data
    loads (the runner checks the results folder is writable)."""
    force = bool(cfg.get("force")) if force is None else force
    ident = identify(cfg)
    if not force and (done := finished_cell(cfg, ident=ident)) is not None:
        return done
    if before_work is not None:
        before_work(ident)
    spec = CATALOG.get("strategy", strategy_impl(cfg.strategy))
    reranker = reranker_config(cfg)  # composed once, up front: the eval and calibration retrievals share it
    calibration: list[Example] | None = None
    data: dict[str, Any] | None = None
    requested: dict[str, int] = {}
    if examples is None:
        loaded = loaded if loaded is not None else load(cfg)
        cfg, requested = sized_to_data(cfg, loaded)
        if requested:  # the data held fewer queries than asked: the cell is the one that runs
            ident = identify(cfg)
            if not force and (done := finished_cell(cfg, ident=ident)) is not None:
                return done
        examples, calibration, data = retrieve_for(cfg, loaded.examples, engines, reranker), loaded.calibration, loaded.load.to_dict()
    # worked out before the engine is taken: a routed cell's probe has its data first (a reranker may need an engine)
    strategy = strategy_for(spec, cfg, engines, calibration, reranker)
    return PreparedCell(cfg=cfg, ident=ident, examples=list(examples), calibration=calibration, strategy=strategy,
                        data=data, requested=requested)


def ensure_probe(cfg: Settings, pool: EngineSource, n: int | None = None, force: bool = False) -> tuple[Any, Path, bool]:
    """The finished probe of ``cfg`` (``madara probe``, a ``kind: probes`` grid), or run now: the probe's
    walk (:func:`prepare_probe`: identity once, calibration split loaded and retrieved first, as a
    reranker may need its own engine), then the probed model's engine. Returns (record, path, reused)."""
    from madara_cli.diagnose.probe import find_or_run_probe
    from madara_cli.experiment.treat import track_probe

    prepared = prepare_probe(cfg, pool, n, force=force)
    record, path, reused = find_or_run_probe(cfg, pool.get(cfg), force=force, examples=prepared.examples, spec=prepared.ident)
    track_probe(cfg, record, path, reused)
    return record, path, reused
