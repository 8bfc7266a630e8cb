"""The results index the tables read: :func:`load_results` scans a results folder into
:class:`Results` of :class:`StoredCell` (a cell's record, its folder, and which metric
``em`` holds) and probe records (:data:`StoredProbe`), reading every file through
:mod:`.record_files`. :func:`support_in_topk` is the one reading of a prediction row's
supporting-chain coverage (Table 17, Appendix J)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from madara_cli.errors import RecordError
from madara_cli.metrics import metric_name
from madara_cli.results.outputs import METRICS, CellRecord, ProbeRecord, _num
from madara_cli.results.record_files import (
    PROBE_FILE,
    PROBES_GRID,
    folder_problem,
    is_finished_cell,
    read_cell,
    read_predictions,
    read_probe,
    record_problem,
)

# --- the results index ----------------------------------------------------------------------------

TABLE_METRICS = METRICS
BINARY_METRICS = ("em", "em_strict", "contains")


@dataclass(frozen=True, eq=False)
class StoredCell:
    """A finished cell as the tables see it: its record, its folder, and which metric
    ``em`` holds (``madara tables --metric``)."""

    record: CellRecord = field(compare=False, hash=False)
    path: Path = field(compare=False, hash=False)
    metric: str = "em"

    grid = property(lambda self: self.record.grid)
    model = property(lambda self: self.record.model)
    benchmark = property(lambda self: self.record.benchmark)
    strategy = property(lambda self: self.record.strategy)
    retriever = property(lambda self: self.record.retriever)
    k = property(lambda self: self.record.k)
    seed = property(lambda self: self.record.seed)
    limit = property(lambda self: self.record.limit)
    key = property(lambda self: self.record.key)
    n = property(lambda self: self.record.n)
    accounting = property(lambda self: self.record.accounting)
    assessment = property(lambda self: self.record.assessment)
    calibration_split = property(lambda self: self.record.calibration_split)

    @property
    def em(self) -> float | None:
        """The table metric (``metric``; EM by default), a fraction."""
        return _num(self.record.metric(self.metric))

    @property
    def f1(self) -> float | None:
        return _num(self.record.f1)

    @property
    def contains(self) -> float | None:
        return _num(self.record.contains)

    @property
    def outcome_metric(self) -> str:
        """The per-query 0/1 outcome paired tests use: the table metric when binary, else EM."""
        return self.metric if self.metric in BINARY_METRICS else "em"

    def predictions(self) -> tuple[dict[str, Any], ...] | None:
        try:
            return read_predictions(self.path)
        except ValueError:
            return None

    def calls_per_query(self) -> float | None:
        return self.record.calls_per_query()


StoredProbe = ProbeRecord  # a probe as the tables see it: its record, with ``path``


@dataclass(frozen=True)
class Results:
    """Index over a results folder: finished cells and probes."""

    root: Path
    cells: tuple[StoredCell, ...]
    probes: tuple[ProbeRecord, ...]
    skipped: tuple[str, ...] = ()  # folders that hold results madara cannot read
    problems: tuple[tuple[str, str], ...] = ()  # (folder, what is wrong with it), the same folders
    routing_nf: str = "calibration"  # the NF EM the routing tables route on (ROUTING_NF_SOURCES)

    def find(self, model: str, benchmark: str, strategy: str, grid: str | None = None,
             retrievers: Sequence[str] = ("bm25s", "pyserini")) -> StoredCell | None:
        """Best matching cell: own grid first, then full runs, then largest n, then seed 0."""
        matches = [
            c for c in self.cells if (c.model, c.benchmark, c.strategy) == (model, benchmark, strategy) and c.retriever in retrievers
        ]
        if not matches:
            return None
        return min(matches, key=lambda c: (c.grid != grid, c.limit is not None, -c.n, c.seed or 0, c.key))

    def probe(self, model: str, benchmark: str, n_preferred: int = 100) -> ProbeRecord | None:
        """The probe for a pair, preferring the paper's n = 100, then the largest n."""
        matches = [p for p in self.probes if (p.model, p.benchmark) == (model, benchmark)]
        if not matches:
            return None
        return min(matches, key=lambda p: (p.n != n_preferred, -p.n))


# Which NF EM the routing tables (8, 9, 19) route on: the probe's NF over its
# calibration queries (what strategy=madara routes on; Section 4: "The NF threshold is
# estimated from the RSC calibration set"), or the NF cell over the evaluated set.
ROUTING_NF_SOURCES = ("calibration", "full")


def load_results(results_dir: Path | str, metric: str = "em", routing_nf: str = "calibration") -> Results:
    """Scan ``results/<grid>/<cell>/`` and ``results/probes/*/`` for finished records.

    ``metric`` picks what the tables show as each cell's score (``em``, EM as the
    authors compute it, by default; ``em_strict``, ``f1`` or ``contains``; the older
    name ``em_squad`` means ``em``); ``routing_nf`` which NF EM the routing tables
    route on (:data:`ROUTING_NF_SOURCES`).

    Folders starting with ``.`` (``.tmp-*``: runs in progress) are ignored. A folder
    that holds cell files but no readable record (no ``metrics.json`` beside its
    predictions, a malformed or out-of-range record, a folder that cannot be listed)
    and a probe folder without a readable ``probe.json`` are never read as results:
    each is listed in ``skipped`` with its reason in ``problems``, for the caller to
    name, rather than aborting the whole table run.
    """
    metric = metric_name(metric)
    if routing_nf not in ROUTING_NF_SOURCES:
        raise ValueError(f"unknown routing NF source '{routing_nf}'; valid: {', '.join(ROUTING_NF_SOURCES)}")
    root = Path(results_dir)
    cells: list[StoredCell] = []
    probes: list[ProbeRecord] = []
    problems: list[tuple[str, str]] = []
    if not root.is_dir():
        return Results(root, (), (), routing_nf=routing_nf)
    for grid_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            subs = sorted(p for p in grid_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as e:
            problems.append((str(grid_dir), f"cannot be read ({e.strerror or e})"))
            continue
        for sub in subs:
            if grid_dir.name == PROBES_GRID:
                try:
                    probe = read_probe(sub, require=("model", "benchmark"))
                    why = f"has no {PROBE_FILE}"
                except (RecordError, OSError) as e:
                    probe, why = None, str(e)
                if probe is None:
                    problems.append((str(sub), why))
                else:
                    probes.append(probe)
                continue
            if not is_finished_cell(sub):
                if (problem := folder_problem(sub)) is not None:
                    problems.append((str(sub), problem))
                continue
            try:
                record = read_cell(sub, grid_dir.name)
            except RecordError as e:
                problems.append((str(sub), record_problem(e, sub)))
                continue
            cells.append(StoredCell(record, sub, metric))
    return Results(root, tuple(cells), tuple(probes), tuple(p for p, _ in problems), tuple(problems), routing_nf)


# --- a prediction row's supporting chain (MuSiQue) ---------------------------------------------

_HOPS = re.compile(r"^(\d+)hop")


def hop_count(example_id: Any) -> int | None:
    """The chain length MuSiQue's id prefix names (``2hop__``, ``3hop1__``: one paragraph
    per hop, the loader's ``meta["hops"]`` convention); None for any other id."""
    match = _HOPS.match(str(example_id))
    return int(match.group(1)) if match else None


class Support(NamedTuple):
    """How much of a query's gold supporting chain a strategy kept (Table 17, App. J)."""

    found: int | None  # supporting documents among the kept ones
    complete: bool | None  # whether the whole chain was kept


def support_in_topk(row: Mapping[str, Any]) -> Support:
    """The one reading of a prediction row's ``extra.supporting_in_topk``.

    madara writes a count with ``extra.n_supporting`` beside it
    (:func:`madara_cli.strategies.context.support_coverage`); rows written before also hold a
    bool (chain complete), a list of booleans (one per supporting paragraph), a count
    without a total, or a fraction in [0, 1]. A count without a total takes the chain
    length from MuSiQue's id prefix (``2hop__``, ``3hop1__``: one paragraph per hop,
    the loader's ``meta["hops"]`` convention)."""
    extra = row.get("extra") or {}
    value = extra.get("supporting_in_topk")
    total = extra.get("n_supporting", extra.get("supporting_total"))
    if total is None and (hops := hop_count(row.get("id", ""))) is not None:
        total = hops
    if isinstance(value, bool):
        return Support(None, value)
    if isinstance(value, (list, tuple)):
        return Support(sum(bool(v) for v in value), all(bool(v) for v in value) and len(value) > 0)
    if isinstance(value, int):
        return Support(value, (value >= int(total)) if total else None)
    if isinstance(value, float):
        return Support(round(value * total) if total else None, value >= 1.0 - 1e-9)
    return Support(None, None)
