"""Executes cells: load -> retrieve -> strategy -> metrics -> results folder.

One engine per model is kept open in a :class:`EnginePool`, so the cells of one
model (which a grid runs back to back) load the weights once. A cell's folder is
written under a temporary name and renamed when complete: a folder with
``metrics.json`` is always a finished cell, and a killed run leaves only a
``.tmp-*`` folder plus the completions already in the cache, from which the rerun
resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from madara_cli import metrics as M
from madara_cli.backends import make_backend
from madara_cli.backends.base import Backend
from madara_cli.backends.cache import CachedLLM, ProgressFn, ResponseCache
from madara_cli.config import to_plain
from madara_cli.data.loaders import load_benchmark
from madara_cli.data.retrieval import retrieve
from madara_cli.grid import Cell
from madara_cli.records import Example, Prediction
from madara_cli.strategies import STRATEGIES, StrategyContext, load_all


@dataclass
class CellResult:
    cell: Cell
    folder: Path
    metrics: dict[str, Any]
    skipped: bool = False  # finished earlier; read from disk


class EnginePool:
    """Engines keyed by (model, backend) plus one shared response cache per path."""

    def __init__(self, progress: ProgressFn | None = None, factory: Callable[[DictConfig], Backend] = make_backend,
                 cache_factory: Callable[[str], ResponseCache] = ResponseCache):
        self._engines: dict[tuple, CachedLLM] = {}
        self._caches: dict[str, ResponseCache] = {}
        self._progress = progress
        self._factory = factory
        self._cache_factory = cache_factory  # launch.py: per-worker shards on cluster launchers

    def get(self, cfg: DictConfig) -> CachedLLM:
        ident = (json.dumps(to_plain(cfg.model), sort_keys=True), json.dumps(to_plain(cfg.backend), sort_keys=True), int(cfg.seed))
        if ident not in self._engines:
            # One engine at a time: a GPU holds one 7-32B model, and grids run the
            # cells of a model back to back, so switching models is rare.
            for old in self._engines.values():
                old.backend.close()
            self._engines.clear()
            cache_path = str(Path(cfg.cache).resolve())
            if cache_path not in self._caches:
                self._caches[cache_path] = self._cache_factory(cache_path)
            cache = self._caches[cache_path]
            self._engines[ident] = CachedLLM(self._factory(cfg), cache, self._progress)
        return self._engines[ident]

    def close(self) -> None:
        for llm in self._engines.values():
            llm.backend.close()
        for cache in self._caches.values():
            cache.close()
        self._engines.clear()
        self._caches.clear()


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")


def prediction_rows(examples: list[Example], preds: list[Prediction]) -> tuple[list[dict], list[M.Scores]]:
    by_id = {p.example_id: p for p in preds}
    rows, scores = [], []
    for ex in examples:
        p = by_id[ex.id]
        s = M.score(p.answer, ex.answers)
        scores.append(s)
        rows.append({
            "id": ex.id, "question": ex.question, "answers": list(ex.answers), "prediction": p.answer, "raw": p.raw,
            "em": int(s.em), "f1": round(s.f1, 4), "contains": int(s.contains), "doc_ids": list(p.doc_ids), "extra": p.extra,
        })
    return rows, scores


def reranker_engine(cfg: DictConfig, pool: EnginePool) -> CachedLLM | None:
    """The engine a generative reranker needs (``retriever=rerank``): the model named by
    ``retriever.model`` (the paper: Qwen3-0.6B), else the cell's own."""
    if cfg.retriever.name != "rerank":
        return None
    if cfg.retriever.get("model"):
        from madara_cli.config import compose

        return pool.get(compose([f"model={cfg.retriever.model}", f"backend={cfg.backend.name}", f"seed={cfg.seed}"]))
    return pool.get(cfg)


def run_cell(cfg: DictConfig, pool: EnginePool, examples: list[Example] | None = None) -> CellResult:
    """Run one cell (or read it back if finished and not ``cfg.force``)."""
    cell = Cell.from_cfg(cfg)
    folder = cell.folder(cfg.results_dir)
    if (folder / "metrics.json").is_file() and not cfg.force:
        return CellResult(cell, folder, json.loads((folder / "metrics.json").read_text()), skipped=True)
    load_all()
    strategy = STRATEGIES.get(cfg.strategy.name)
    t0 = time.perf_counter()
    if examples is None:
        examples = load_benchmark(cfg.benchmark, seed=int(cfg.seed))
        if cfg.limit is not None:
            examples = examples[: int(cfg.limit)]
        examples = retrieve(examples, cfg, llm=reranker_engine(cfg, pool))
    llm = pool.get(cfg)
    with llm.fresh_accounting() as accounting:
        ctx = StrategyContext(llm=llm, cfg=cfg)
        preds = strategy(ctx, examples)
    rows, scores = prediction_rows(examples, preds)
    metrics = {
        "cell": cell.to_dict(),
        **M.aggregate(scores),
        **ctx.report,
        "accounting": accounting.to_dict(),
        "wall_seconds": round(time.perf_counter() - t0, 3),
    }
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
    with (tmp / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    _write_json(tmp / "metrics.json", metrics)
    if folder.exists():  # --force: replace the old result only once the new one is complete
        shutil.rmtree(folder)
    tmp.rename(folder)
    return CellResult(cell, folder, metrics)


@dataclass
class Failed:
    """A cell or probe that could not run (data unreachable, engine missing); the rest
    of the grid goes on and the reason is reported."""

    label: str
    reason: str


def _run_each(cfgs: list[DictConfig], work: Callable[[DictConfig, EnginePool], Any], label: Callable[[DictConfig], str], progress, keep_going: bool) -> list:
    """Run ``work`` for each config with one shared engine pool. With ``keep_going``, a
    config whose data or engine is unavailable is reported as :class:`Failed` and the
    rest go on; anything else stops the run (finished work is already on disk)."""
    from madara_cli.backends.base import BackendError
    from madara_cli.data.loaders import DataError

    pool = EnginePool(progress=progress)
    out: list = []
    try:
        for i, cfg in enumerate(cfgs, 1):
            if progress is not None:
                progress.label = f"[{i}/{len(cfgs)}] {label(cfg)}"
            try:
                out.append(work(cfg, pool))
            except (DataError, BackendError) as e:
                if not keep_going:
                    raise
                out.append(Failed(label(cfg), str(e)))
    finally:
        pool.close()
    return out


def run_cells(cfgs: list[DictConfig], progress=None, keep_going: bool = False) -> list[CellResult | Failed]:
    """Run cells in order, one engine per model (see :func:`_run_each`)."""
    return _run_each(cfgs, run_cell, lambda c: f"{c.model.name}/{c.benchmark.name}/{c.strategy.name}", progress, keep_going)


def run_probes(cfgs: list[DictConfig], progress=None, keep_going: bool = False, force: bool = False) -> list[tuple[dict, Path, bool] | Failed]:
    """One RSC probe per config (a ``kind: probes`` grid)."""
    from madara_cli.probe import find_or_run_probe

    return _run_each(
        cfgs, lambda cfg, pool: find_or_run_probe(cfg, pool.get(cfg), force=force),
        lambda c: f"probe {c.model.name}/{c.benchmark.name}", progress, keep_going,
    )
