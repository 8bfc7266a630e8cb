"""Executes cells: the pipeline's one walk up to the engine (:mod:`madara_cli.experiment.walk`;
a ``madara`` cell probes and routes there, :mod:`~madara_cli.experiment.treat`), then the
strategy on the cell's engine -> metrics -> results folder.

One engine per model stays open in an :class:`~madara_cli.experiment.engines.EnginePool`, so
a model's cells (run back to back) load the weights once. A cell's folder is written under a
temporary name and renamed when complete (:func:`madara_cli.results.record_files.write_cell`):
a folder with a metrics record is always finished, and a killed run leaves only a ``.tmp-*``
folder plus the completions in the cache, from which the rerun resumes.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from madara_cli.config.settings import Node, Settings
from madara_cli.core import metrics as M
from madara_cli.core.errors import ConfigError
from madara_cli.core.records import Example, Prediction
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.walk import CellResult, prepare_cell
from madara_cli.results.health import Health, HealthRule, cell_health
from madara_cli.results.outputs import CellRecord, timing_section
from madara_cli.results.prompt_log import prompt_renderer
from madara_cli.results.provenance import now_iso, provenance
from madara_cli.results.record_files import write_cell
from madara_cli.strategies import StrategyContext

log = logging.getLogger(__name__)


def ensure_writable(folder: Path) -> None:
    """Create ``folder`` and make sure files can be written in it; else an OSError naming it (one CLI line)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "results folder is not writable", str(folder))


def check_writable(folder: Path) -> None:
    """Make sure ``folder`` could be created and written, without creating it (a cell whose data then fails
    leaves no empty folder); a ConfigError names the first existing path that refuses."""
    existing = Path(os.path.abspath(folder))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"cannot use {existing}: not a folder (results_dir is a folder, made when missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot use {existing}: results folder is not writable")


def prediction_rows(examples: list[Example], preds: list[Prediction], tidy: bool = True) -> tuple[list[dict], list[M.Scores]]:
    by_id = {p.example_id: p for p in preds}
    rows, scores = [], []
    for ex in examples:
        p = by_id[ex.id]
        s = M.score(p.answer, ex.answers, tidy=tidy)
        scores.append(s)
        rows.append({
            "id": ex.id, "question": ex.question, "answers": list(ex.answers), "prediction": p.answer, "raw": p.raw,
            "em": int(s.em), "em_strict": int(s.em_strict), "f1": round(s.f1, 4), "contains": int(s.contains), "doc_ids": list(p.doc_ids), "extra": p.extra,
        })
    return rows, scores


def evaluated_set_info(cfg: Settings, examples: list[Example], calibration: list[Example] | None,
                       requested: dict[str, int] | None = None) -> dict[str, Any]:
    """How the evaluated queries relate to the calibration split (recorded per cell, footnoted by tables):
    split mode, calibration size, how many evaluated queries are calibration ones (when the cell
    loaded its data), and the limit or calibration asked for when the data held fewer (``requested``)."""
    split = str(cfg.benchmark.get("calibration_split", "nested"))
    info: dict[str, Any] = {"calibration_split": split, "calibration": int(cfg.benchmark.calibration), "metric_version": M.METRIC_VERSION}
    if calibration is not None:
        ids = {ex.id for ex in calibration}
        info["calibration_in_evaluated"] = sum(ex.id in ids for ex in examples)
    info.update(requested or {})
    return info


def run_cell(cfg: Settings, pool: EnginePool, examples: list[Example] | None = None) -> CellResult:
    """Run one cell (or read it back if finished and not ``cfg.force``): the walk up to the engine, then
    the strategy on the cell's engine, the metrics and the record."""
    t0, started = time.perf_counter(), now_iso()
    prepared = prepare_cell(cfg, pool, examples=examples, before_work=lambda ident: check_writable(ident.folder(cfg.results_dir).parent))
    if isinstance(prepared, CellResult):
        log.info("%s: finished earlier, read back from %s", prepared.cell.key, prepared.folder)
        check_health(cfg, prepared.cell.key, prepared.record.health, earlier=True)
        track_cell(cfg, prepared)  # a cell finished before tracking was on is logged once
        return prepared
    cfg, ident, examples, calibration = prepared.cfg, prepared.ident, prepared.examples, prepared.calibration
    data_report, requested, strategy = prepared.data, prepared.requested, prepared.strategy
    cell, folder = ident.cell, ident.folder(cfg.results_dir)
    evaluated_set = evaluated_set_info(cfg, examples, calibration, requested)
    llm = pool.get(cfg)
    with llm.fresh_accounting() as accounting, llm.logging_samples(bool(cfg.get("log_samples", True))) as samples:
        ctx = StrategyContext(llm=llm, cfg=cfg)
        preds = strategy(ctx, examples)
    rows, scores = prediction_rows(examples, preds, tidy=str((cfg.get("reading") or {}).get("answers", "tidy")) == "tidy")
    acct = accounting.to_dict()
    from madara_cli.data.splits import warn

    if acct.get("truncated"):
        warn(
            f"{cell.key}: {acct['truncated']} of {acct['requests']} prompts were longer than the context and were cut in "
            "the middle (accounting.truncated in the cell's metrics); raise backend.n_ctx or lower retriever.k"
        )
    cot_cut = sum(v.get("cut_at_max_tokens", 0) for k, v in acct.get("by_stage", {}).items() if k in ("score-cot", "rsc-cot"))
    if cot_cut:
        warn(
            f"{cell.key}: {cot_cut} CoT replies stopped at generation.cot_max_tokens={int(cfg.generation.cot_max_tokens)} "
            "(accounting.by_stage.*.cut_at_max_tokens); a reply cut before its score is a parse failure"
        )
    health = cell_health(ctx.report, acct, HealthRule.from_config(cfg))
    check_health(cfg, cell.key, health)  # before anything is written: a refused cell leaves no folder
    record = CellRecord(
        cell=cell,
        **M.aggregate(scores),
        evaluated_set=evaluated_set,
        empty_answers=sum(1 for r in rows if not str(r["prediction"]).strip()),  # empty generations score 0, counted here
        # The settings the key covers as they ran (summary.csv's columns; prompt digests are not in config.yaml).
        report={**ctx.report, "settings": ident.settings(cfg)},
        data=data_report,
        accounting=acct,
        health=health,
        # All above is a function of config, data and seed; timing and provenance live apart, so
        # two runs compare byte for byte without them.
        provenance=provenance(cfg, started, now_iso(), time.perf_counter() - t0, engine=llm.backend),
        timing=timing_section(acct, time.perf_counter() - t0),
    )
    log_samples = bool(cfg.get("log_samples", True))
    write_cell(folder, record, cfg.to_yaml(), rows, samples if log_samples else None,
               prompt_renderer(llm.backend) if log_samples else None)
    log.info("%s: n=%d EM %.1f%% F1 %.1f%% contains %.1f%%, %d engine calls -> %s", cell.key, record.n, 100 * record.em,
             100 * record.f1, 100 * record.contains, accounting.to_dict().get("calls_issued", 0), folder)
    result = CellResult(cell, folder, record)
    track_cell(cfg, result)
    return result


def check_health(cfg: Settings, key: str, health: Health, earlier: bool = False) -> None:
    """One warning line for a degraded cell (the config's ``health`` rule); ``on_degraded=fail``: DegradedCell."""
    from madara_cli.core.errors import DegradedCell

    rule = HealthRule.from_config(cfg)
    judged = health.judged(rule)
    if not judged.degraded:
        return
    when = "finished earlier, and " if earlier else ""
    if rule.on_degraded == "fail":
        raise DegradedCell(f"{key}: {when}degraded: {judged.reason}; health.on_degraded=fail refuses it"
                           + ("" if earlier else " (nothing written; its completions stay cached)"))
    from madara_cli.data.splits import warn

    warn(f"{key}: {when}degraded: {judged.reason}; its numbers are marked wherever they appear "
         "(health.on_degraded=fail refuses such a cell)")


def track_cell(cfg: Settings, result: CellResult) -> None:
    """Log a finished cell to ``cfg.logger``'s tracker, once per key (replaced when ``force=true`` recomputed it)."""
    from madara_cli.results.tracking import cell_run, track

    track(cfg, lambda: cell_run(result.folder, result.record), replace=bool(cfg.force) and not result.skipped)


@dataclass
class Failed:
    """A cell or probe that could not run (data unreachable, engine missing): reported, the grid goes on."""

    label: str
    reason: str


def _run_each(cfgs: list[Settings], work: Callable[[Node, EnginePool], Any], label: Callable[[Settings], str], progress, keep_going: bool) -> list:
    """``work`` for each config on one engine pool; ``keep_going``: unavailable data or engine is a
    :class:`Failed` and the rest go on (anything else stops the run; finished work is on disk)."""
    from madara_cli.core.errors import BackendError, DataError
    from madara_cli.results.tracking import preflight

    preflight(cfgs)  # a tracker that cannot be used stops the run here, before any engine starts
    out: list = []
    cells = getattr(progress, "cells", None) if len(cfgs) > 1 else None
    ran_seconds: list[float] = []  # cells that ran (not read back): the ETA's rate
    with EnginePool(progress=progress) as pool:
        for i, cfg in enumerate(cfgs, 1):
            if progress is not None:
                progress.label = f"[{i}/{len(cfgs)}] {label(cfg)}"
            if cells is not None:
                cells(i - 1, len(cfgs), _eta(ran_seconds, len(cfgs) - i + 1))
            t0 = time.perf_counter()
            try:
                out.append(work(cfg, pool))
            except (DataError, BackendError) as e:
                if not keep_going:
                    raise
                out.append(Failed(label(cfg), str(e)))
            if not _read_back(out[-1]):
                ran_seconds.append(time.perf_counter() - t0)
        if cells is not None:
            cells(len(cfgs), len(cfgs), 0.0)
    return out


def _read_back(result: Any) -> bool:
    """A cell or probe found finished on disk (or one that failed): no time to learn from."""
    if isinstance(result, Failed):
        return True
    if isinstance(result, tuple):  # (probe record, path, reused)
        return bool(result[2])
    return bool(getattr(result, "skipped", False))


def _eta(ran_seconds: list[float], remaining: int) -> float | None:
    """Seconds left: the mean time of the cells that ran so far times the cells left."""
    return sum(ran_seconds) / len(ran_seconds) * remaining if ran_seconds else None


def run_cells(cfgs: list[Settings], progress=None, keep_going: bool = False) -> list[CellResult | Failed]:
    """Run cells in order, one engine per model (see :func:`_run_each`)."""
    return _run_each(cfgs, run_cell, lambda c: f"{c.model.name}/{c.benchmark.name}/{c.strategy.name}", progress, keep_going)


def run_probes(cfgs: list[Settings], progress=None, keep_going: bool = False, force: bool = False) -> list[tuple[dict, Path, bool] | Failed]:
    """One RSC probe per config (a ``kind: probes`` grid)."""
    from madara_cli.experiment.walk import ensure_probe

    return _run_each(
        cfgs, lambda cfg, pool: ensure_probe(cfg, pool, force=force),
        lambda c: f"probe {c.model.name}/{c.benchmark.name}", progress, keep_going,
    )
