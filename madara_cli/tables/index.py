"""The results index the tables read: finished cells and probes found on disk.

:func:`load_results` scans ``results/<grid>/<cell>/metrics.json`` and
``results/probes/*/probe.json`` into a :class:`Results` index; :meth:`Results.find`
picks the cell a table shows for a (model, benchmark, strategy) in any grid folder,
preferring the table's own grid, then full runs over ``limit``-ed ones, then the
largest n. Nothing here formats or computes a table value, and nothing is re-run.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from madara_cli.tables import paper_values as pv
from madara_cli.tables.compare import load_predictions

TABLE_METRICS = ("em", "em_squad", "f1", "contains")
BINARY_METRICS = ("em", "em_squad", "contains")
SPARSE = ("bm25s", "pyserini")
DENSE = ("dense",)
RERANK = ("rerank",)
PROBES_GRID = "probes"


@dataclass(frozen=True)
class StoredCell:
    """A finished cell folder ``results/<grid>/<key>/`` as read back from ``metrics.json``."""

    grid: str
    model: str
    benchmark: str
    strategy: str
    retriever: str
    k: int | None
    seed: int | None
    limit: int | None
    key: str
    n: int
    em: float | None
    f1: float | None
    contains: float | None
    accounting: dict[str, Any] = field(compare=False, hash=False)
    path: Path = field(compare=False, hash=False)
    metric: str = "em"  # which metric ``em`` holds (``madara tables --metric``)
    assessment: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # metrics.json "assessment"
    calibration_split: str | None = None  # how the evaluated set relates to the calibration queries

    @property
    def outcome_metric(self) -> str:
        """The per-query 0/1 outcome paired tests use: the table metric when binary, else EM."""
        return self.metric if self.metric in BINARY_METRICS else "em"

    def predictions(self) -> tuple[dict[str, Any], ...] | None:
        try:
            return load_predictions(self.path)
        except ValueError:
            return None

    def calls_per_query(self) -> float | None:
        """LLM calls the strategy needs per query, cached or not: a cache hit is a call
        another cell happened to pay for. Uses ``requests`` when the accounting has it,
        else ``calls_issued + cache_hits``."""
        acc = self.accounting or {}
        if not self.n or not ({"requests", "calls_issued"} & set(acc)):
            return None
        total = acc["requests"] if "requests" in acc else float(acc.get("calls_issued", 0)) + float(acc.get("cache_hits", 0))
        return float(total) / self.n


@dataclass(frozen=True)
class StoredProbe:
    """An RSC probe ``results/probes/<model>__<benchmark>__n<N>/probe.json``."""

    model: str
    benchmark: str
    n: int
    data: dict[str, Any] = field(compare=False, hash=False)
    path: Path = field(compare=False, hash=False)

    def rho(self, level: int) -> float | None:
        values = self.data.get("rho") or []
        return _num(values[level]) if level < len(values) else None


@dataclass(frozen=True)
class Results:
    """Index over a results folder: finished cells and probes."""

    root: Path
    cells: tuple[StoredCell, ...]
    probes: tuple[StoredProbe, ...]
    skipped: tuple[str, ...] = ()

    def find(
        self, model: str, benchmark: str, strategy: str, grid: str | None = None, retrievers: Sequence[str] = SPARSE
    ) -> StoredCell | None:
        """Best matching cell: own grid first, then full runs, then largest n, then seed 0."""
        matches = [
            c for c in self.cells if (c.model, c.benchmark, c.strategy) == (model, benchmark, strategy) and c.retriever in retrievers
        ]
        if not matches:
            return None
        return min(matches, key=lambda c: (c.grid != grid, c.limit is not None, -c.n, c.seed or 0, c.key))

    def probe(self, model: str, benchmark: str) -> StoredProbe | None:
        """The probe for a pair, preferring the paper's n = 100, then the largest n."""
        matches = [p for p in self.probes if (p.model, p.benchmark) == (model, benchmark)]
        if not matches:
            return None
        return min(matches, key=lambda p: (p.n != pv.N_PROBE, -p.n))


def _num(x: Any) -> float | None:
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _stored_cell(cell_dir: Path, grid_name: str, metrics: dict[str, Any], metric: str = "em") -> StoredCell | None:
    cell = metrics.get("cell") or {}
    if not all(cell.get(k) for k in ("model", "benchmark", "strategy")):
        return None
    return StoredCell(
        grid=str(cell.get("grid") or grid_name),
        model=str(cell["model"]),
        benchmark=str(cell["benchmark"]),
        strategy=str(cell["strategy"]),
        retriever=str(cell.get("retriever") or "bm25s"),
        k=cell.get("k"),
        seed=cell.get("seed"),
        limit=cell.get("limit"),
        key=str(cell.get("key") or cell_dir.name),
        n=int(metrics.get("n") or 0),
        em=_num(metrics.get(metric)),
        f1=_num(metrics.get("f1")),
        contains=_num(metrics.get("contains")),
        accounting=dict(metrics.get("accounting") or {}),
        path=cell_dir,
        metric=metric,
        assessment=dict(metrics.get("assessment") or {}),
        calibration_split=(metrics.get("evaluated_set") or {}).get("calibration_split"),
    )


def load_results(results_dir: Path | str, metric: str = "em") -> Results:
    """Scan ``results/<grid>/<cell>/metrics.json`` and ``results/probes/*/probe.json``.

    ``metric`` picks what the tables show as each cell's score (``em``, the paper's
    EM, by default; ``em_squad``, ``f1`` or ``contains``).

    Folders starting with ``.tmp`` (unfinished cells) or ``.`` are ignored; unreadable
    files are listed in ``skipped`` rather than aborting the whole table run.
    """
    if metric not in TABLE_METRICS:
        raise ValueError(f"unknown metric '{metric}'; valid: {', '.join(TABLE_METRICS)}")
    root = Path(results_dir)
    cells: list[StoredCell] = []
    probes: list[StoredProbe] = []
    skipped: list[str] = []
    if not root.is_dir():
        return Results(root, (), (), ())
    for grid_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for sub in sorted(p for p in grid_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if grid_dir.name == PROBES_GRID:
                data = _read_json(sub / "probe.json")
                if data is None or not data.get("model") or not data.get("benchmark"):
                    skipped.append(str(sub))
                    continue
                probes.append(StoredProbe(str(data["model"]), str(data["benchmark"]), int(data.get("n") or 0), data, sub))
                continue
            if not (sub / "metrics.json").is_file():
                continue
            metrics = _read_json(sub / "metrics.json")
            stored = _stored_cell(sub, grid_dir.name, metrics, metric) if metrics else None
            if stored is None:
                skipped.append(str(sub))
            else:
                cells.append(stored)
    return Results(root, tuple(cells), tuple(probes), tuple(skipped))


def _results(source: Path | str | Results) -> Results:
    return source if isinstance(source, Results) else load_results(source)


def _probe_value(probe: StoredProbe | None, *path: str | int) -> Any:
    node: Any = probe.data if probe else None
    for step in path:
        if node is None:
            return None
        if isinstance(step, int):
            node = node[step] if isinstance(node, (list, tuple)) and step < len(node) else None
        else:
            node = node.get(step) if isinstance(node, dict) else None
    return node


_HOPS = re.compile(r"^(\d+)hop")


def _support_info(extra: dict[str, Any], example_id: str = "") -> tuple[int | None, bool | None]:
    """(number of gold supporting paragraphs in PDE's top-k, whether the whole chain is there).

    Accepts ``supporting_in_topk`` as a bool (chain complete), a list of booleans (one
    per supporting paragraph), a count or a fraction in [0, 1]. A count needs the
    chain length: ``extra.n_supporting`` when the strategy records it, else MuSiQue's
    id prefix (``2hop__``, ``3hop1__``, ...), one supporting paragraph per hop, the
    same convention the MuSiQue loader uses for ``meta["hops"]``.
    """
    value = extra.get("supporting_in_topk")
    total = extra.get("n_supporting", extra.get("supporting_total"))
    if total is None and (match := _HOPS.match(str(example_id))):
        total = int(match.group(1))
    if isinstance(value, bool):
        return None, value
    if isinstance(value, (list, tuple)):
        return sum(bool(v) for v in value), all(bool(v) for v in value) and len(value) > 0
    if isinstance(value, int):
        return value, (value >= int(total)) if total else None
    if isinstance(value, float):
        count = round(value * total) if total else None
        return count, value >= 1.0 - 1e-9
    return None, None
