"""Finished cells and probes for table tests, written by the results store.

Every test that needs a results folder builds it through :func:`write_cell` and
:func:`write_probe` (and edits one through :func:`update_cell` / :func:`update_predictions`),
never by writing JSON itself: the records go through
:class:`~madara_cli.results.outputs.CellRecord` / :class:`~madara_cli.results.outputs.ProbeRecord`
and :mod:`madara_cli.results.record_files`, the runner's own writer.

- ``write_cell`` writes a finished cell folder ``<results>/<grid>/<key>/`` the way the
  runner does: one prediction per query (``id``, ``em``, ``f1``, ``contains``,
  ``doc_ids``, ``extra``), metrics as the means over them unless given.
- ``write_probe`` writes ``<results>/probes/<model>__<benchmark>__n<N>/`` with every
  section the probe records (rho, per_query, bootstrap, split_half, subsets30,
  degenerate, entropy, em_nf, route).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from madara_cli.results import record_files
from madara_cli.results.outputs import CellRecord, ProbeRecord

PROBES_GRID = record_files.PROBES_GRID


def _prediction(i: int, em: int) -> dict[str, Any]:
    return {
        "id": f"q{i}",
        "question": f"question {i}",
        "answers": ["x"],
        "prediction": "x" if em else "y",
        "em": em,
        "f1": float(em),
        "contains": em,
        "doc_ids": [],
        "extra": {},
    }


def _mean(rows: Sequence[Mapping[str, Any]], metric: str) -> float:
    return sum(float(r.get(metric) or 0) for r in rows) / len(rows) if rows else 0.0


def write_cell(
    results_dir: Path,
    grid: str,
    model: str,
    benchmark: str,
    strategy: str,
    correct: Sequence[int] = (),
    n: int = 10,
    *,
    retriever: str = "bm25s",
    folder: str | None = None,
    extra: Mapping[int, Mapping[str, Any]] | None = None,
    predictions: Sequence[Mapping[str, Any]] | None = None,
    ids: Sequence[str] | None = None,
    em: float | None = None,
    f1: float | None = None,
    contains: float | None = None,
    calls: int | None = None,
    accounting: Mapping[str, Any] | None = None,
    assessment: Mapping[str, Any] | None = None,
    limit: int | None = None,
    seed: int = 0,
    k: int = 10,
    **sections: Any,
) -> Path:
    """A finished cell; returns its folder.

    Queries ``q0 .. q{n-1}`` are right (em = f1 = contains = 1) on the ``correct``
    indices and wrong elsewhere. ``extra`` sets per-query ``extra`` fields,
    ``predictions`` gives the rows outright (each merged over the default row for its
    index, so ``n`` becomes their count), ``ids`` renames the queries. ``em``/``f1``/
    ``contains`` override the cell's metrics (default: the mean over the predictions).
    ``calls`` is ``calls_issued`` (default n); ``accounting`` replaces the whole block.
    Further keyword arguments become top-level sections of the cell's record
    (``evaluated_set={...}``, ``em_strict=0.5``, a strategy's report section, ...).
    """
    if predictions is not None:
        n = len(predictions)
        rows = [{**_prediction(i, 0), **dict(p)} for i, p in enumerate(predictions)]
    else:
        rows = [_prediction(i, int(i in set(correct))) for i in range(n)]
    for i, fields in (extra or {}).items():
        rows[i]["extra"] = {**rows[i].get("extra", {}), **dict(fields)}
    for i, new_id in enumerate(ids or ()):
        rows[i]["id"] = new_id
    key = folder or f"{model}__{benchmark}__{strategy}__{retriever}"
    cell_dir = Path(results_dir) / grid / key
    if cell_dir.exists():
        raise FileExistsError(cell_dir)
    metrics: dict[str, Any] = {
        "cell": {
            "grid": grid,
            "model": model,
            "benchmark": benchmark,
            "strategy": strategy,
            "retriever": retriever,
            "k": k,
            "seed": seed,
            "limit": limit,
            "key": key,
        },
        "n": n,
        "em": _mean(rows, "em") if em is None else em,
        "f1": _mean(rows, "f1") if f1 is None else f1,
        "contains": _mean(rows, "contains") if contains is None else contains,
        "assessment": dict(assessment) if assessment is not None else {"parse_failure_rate": 0.0, "extreme_score_rate": 0.0},
        "accounting": dict(accounting)
        if accounting is not None
        else {"calls_issued": calls if calls is not None else n, "cache_hits": 0, "tokens_in": 0, "tokens_out": 0, "seconds": 0.1},
    }
    metrics.update(sections)
    record_files.write_cell(cell_dir, CellRecord.from_dict(metrics, grid, key), "", rows)
    return cell_dir


def _rewrite(cell_dir: Path, record: CellRecord | None = None, rows: Sequence[Mapping[str, Any]] | None = None) -> None:
    cell_dir = Path(cell_dir)
    record = record if record is not None else record_files.read_cell(cell_dir)
    rows = rows if rows is not None else record_files.read_predictions(cell_dir)
    record_files.write_cell(cell_dir, record, (cell_dir / record_files.CONFIG_FILE).read_text(encoding="utf-8"), [dict(r) for r in rows])


def update_cell(cell_dir: Path, **sections: Any) -> None:
    """Replace top-level sections of a written cell's record."""
    data = {**record_files.read_cell(cell_dir).to_dict(), **sections}
    _rewrite(cell_dir, CellRecord.from_dict(data, Path(cell_dir).parent.name, Path(cell_dir).name))


def update_predictions(cell_dir: Path, edit: Callable[[int, dict[str, Any]], None]) -> None:
    """Edit a written cell's predictions: ``edit(index, row)`` per row."""
    rows = read_predictions(cell_dir)
    for i, row in enumerate(rows):
        edit(i, row)
    _rewrite(cell_dir, rows=rows)


def write_predictions(cell_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace a written cell's predictions with ``rows`` as given (no defaults filled in)."""
    _rewrite(cell_dir, rows=rows)


def read_predictions(cell_dir: Path) -> list[dict[str, Any]]:
    """A written cell's predictions, in order (copies: editing them changes nothing on disk)."""
    return [copy.deepcopy(r) for r in record_files.read_predictions(cell_dir)]


def corrupt_cell(cell_dir: Path, text: str = "{not json") -> None:
    """Make a cell's record unreadable (as a crash mid-write would)."""
    (Path(cell_dir) / record_files.METRICS_FILE).write_text(text)


def write_probe(
    results_dir: Path,
    model: str,
    benchmark: str,
    rho: Sequence[float | None] | None = (0.7, 0.4, 0.1),
    cls: str = "quality-ordered",
    route: str = "cot",
    n: int = 100,
    **fields: Any,
) -> Path:
    """A finished RSC probe; returns its folder. Keyword arguments replace sections
    (``per_query={...}``, ``bootstrap={...}``, ``entropy=0.5``, ``em_nf=0.2``, ...)."""
    probe_dir = Path(results_dir) / PROBES_GRID / f"{model}__{benchmark}__n{n}"
    if probe_dir.exists():
        raise FileExistsError(probe_dir)
    values = [[0.8, 0.7, 0.6, 0.9], [0.4, 0.3, 0.5, 0.2], [0.0, 0.1, -0.1, 0.05]]
    data: dict[str, Any] = {
        "model": model,
        "benchmark": benchmark,
        "n": n,
        "rho": None if rho is None else list(rho),
        "p_values": [1e-5, 1e-4, 0.3],
        "rho_star": -1.0 if cls == "quality-ordered" else -0.5,
        "rho_bar": None if rho is None or None in rho else sum(rho) / 3,
        "rsc_class": cls,
        "coupling": "strong",
        "per_query": {"mean": [0.75, 0.35, 0.01], "std": [0.1, 0.12, 0.08], "values": values},
        "bootstrap": {"ci": [[0.6, 0.8], [0.3, 0.5], [0.0, 0.2]], "stability": 0.95},
        "split_half": {"first": cls, "last": cls},
        "subsets30": {"quality-ordered": 90, "stochastic": 10},
        "degenerate": {"is_degenerate": False, "floor_share": 0.1, "ceiling_share": 0.1, "mean_score": 2.5},
        "entropy": 0.8,
        "em_nf": 0.3,
        "route": route,
        "reason": "test",
    }
    data.update(fields)
    record_files.write_probe(probe_dir, ProbeRecord.from_dict(data))
    return probe_dir


PROV = {
    "madara_version": "0.1.0", "git_commit": "0123456789abcdef", "git_dirty": False, "python": "3.11.7",
    "engine": {"backend": "llamacpp", "package": "llama-cpp-python", "version": "0.3.36"},
    "overrides": ["limit=10", "strategy.scoring=logprob"], "started": "2026-12-01T10:00:00", "ended": "2026-12-01T10:01:00",
    "seconds": 60.0,
}


def demo_like_results(root: Path) -> Path:
    """A results folder shaped like the demo's: SmolLM2 on mini with the strategies of
    Tables 1-2 (calls per query as those strategies spend them), a second model-task,
    and probes on two benchmarks."""
    model, bench = "smollm2-135m", "mini"
    plan = {  # strategy: (right queries, calls per query)
        "nf": ([0, 1, 7], 1), "three_agent": ([0, 1, 2, 7], 31), "sda": ([0, 1, 2, 3], 31), "atf": ([0, 1, 7], 31),
        "rrf": ([0, 2, 7], 31), "pde": (list(range(7)), 21), "pde_random": ([0, 1, 2], 21), "madara": (list(range(7)), 23),
    }
    for strategy, (right, calls) in plan.items():
        write_cell(root, "demo", model, bench, strategy, right, calls=10 * calls, provenance=PROV, timing={"engine_seconds": 12.5})
    write_cell(root, "table2", "llama-3.1-8b", "conflicts", "nf", [0, 1], calls=10)
    write_cell(root, "table2", "llama-3.1-8b", "conflicts", "pde", [0, 1, 2, 3, 4, 5, 6, 7, 8], calls=210)
    write_probe(root, model, bench, [0.31, 0.12, -0.05], "stochastic", "pde", reason="NF 30.0% ≥ τ_NF; stochastic → PDE")
    write_probe(root, "llama-3.1-8b", "conflicts", [0.7, 0.4, 0.1], "quality-ordered", "pde")
    return root
