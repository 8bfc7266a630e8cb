"""What ``madara plan`` counts (:class:`StrategyPlan`, :class:`Plan`, as printed), and what it
counts on when a benchmark's data is not here: placeholder queries at the benchmark's known
evaluated size (:data:`KNOWN_SIZES`), walked through :class:`Loads`. The walk that fills
them in is :mod:`madara_cli.experiment.plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from madara_cli.config.identity import Cell
from madara_cli.config.settings import Node, Settings
from madara_cli.experiment.engine_time import Calibration


@dataclass
class StrategyPlan:
    cells: int = 0
    requests: int = 0
    calls: int = 0  # new unique engine calls this strategy adds, in grid order
    cached: int = 0  # of those, already in the real cache
    prompt_tokens: int = 0
    output_tokens: int = 0  # at most: the uncached calls' max_tokens (score requests: one token)
    probe_requests: int = 0  # of ``requests``, those of routed cells' RSC probes (calibration split)
    finished_cells: int = 0  # cells already on disk: they add no calls, tokens or time
    measured_cells: int = 0
    measured_requests: int = 0
    measured_calls: int = 0
    measured_seconds: float = 0.0  # the finished cells' engine seconds, as recorded (timing.engine_seconds)
    measured_wall_seconds: float = 0.0  # and their wall time (provenance.seconds)
    estimated_cells: int = 0  # cells whose data is not here: counted on placeholder queries
    seconds: float = 0.0  # engine seconds the uncached calls should take (see experiment.cost)
    timed_calls: float = 0.0  # uncached calls with a calibration (``seconds`` covers only these)
    queries: int = 0  # evaluated queries over its cells
    scoring_requests: int = 0  # of ``requests``, those of the agents' scoring stages (score*)

    def per_query(self) -> tuple[float, float] | None:
        """(scoring requests, other requests) per evaluated query, as Table 18's note counts
        them: a routed cell's one-time probe apart (``None`` without queries)."""
        if not self.queries:
            return None
        return self.scoring_requests / self.queries, (self.requests - self.probe_requests - self.scoring_requests) / self.queries

    @property
    def uncached(self) -> int:
        return max(self.calls - self.cached, 0)

    @property
    def fully_timed(self) -> bool:
        return self.timed_calls + 0.5 >= self.uncached


@dataclass
class Plan:
    grid: str
    cells: list[Cell] = field(default_factory=list)
    by_strategy: dict[str, StrategyPlan] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    calibrations: list[Calibration] = field(default_factory=list)

    def total(self) -> StrategyPlan:
        t = StrategyPlan()
        for s in self.by_strategy.values():
            for f in t.__dataclass_fields__:
                setattr(t, f, getattr(t, f) + getattr(s, f))
        return t


def paper_calls_per_query(strategy: str) -> str:
    """Table 18's note on ``strategy``'s LLM calls per query, as printed ("—" where it is not named)."""
    from madara_cli.paper import TABLE18_CALLS_PRINTED

    return TABLE18_CALLS_PRINTED.get(strategy, "—")


def format_per_query(sp: StrategyPlan) -> str:
    """``"21 + 1"``: scoring requests + other requests per query (one decimal where not whole)."""
    pq = sp.per_query()
    if pq is None:
        return "—"
    return " + ".join(f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}" for v in pq)


def within(estimate: int, measured: int, tolerance: float = 0.10) -> bool:
    return measured > 0 and abs(estimate - measured) <= tolerance * measured


# Evaluated queries of the benchmarks smaller than benchmark.sample's cap, for counting
# before their data is here. CONFLICTS (Cattan et al. 2025): the paper's Appendix B.2
# ("On CONFLICTS (Qwen2.5-7B, 458 queries)") and configs/benchmark/conflicts.yaml. The
# others the paper samples at ~1K (§5.1: FEVER, TriviaQA; their sets are far larger) or
# at benchmark.sample (MuSiQue: 100, Table 6).
KNOWN_SIZES = {"conflicts": 458}
PLACEHOLDER_DOC_CHARS = 600  # a retrieved passage's length in characters (FlashRAG's 100-word Wikipedia chunks)
PLACEHOLDER_QUERIES = 20  # walked; counts scale linearly to the configured size


def evaluated_size(cfg: Settings) -> int | None:
    """Queries a cell evaluates when its data is not here: ``limit``, else
    ``benchmark.sample``, each capped by the benchmark's known size; None when unknown."""
    n = cfg.limit if cfg.limit is not None else cfg.benchmark.sample
    known = KNOWN_SIZES.get(str(cfg.benchmark.name))
    if n is None:
        return known
    return min(int(n), known) if known is not None else int(n)


def _calibration_size(cfg: Settings, n: int | None = None) -> int:
    """Calibration queries of a benchmark not here: ``n``, else ``benchmark.calibration``, capped by its known size."""
    wanted = int(n if n is not None else cfg.benchmark.calibration)
    known = KNOWN_SIZES.get(str(cfg.benchmark.name))
    return min(wanted, known) if known is not None else wanted


def placeholder_examples(cfg: Settings, n: int | None = None) -> list | None:
    """Stand-in queries for a benchmark not here: up to :data:`PLACEHOLDER_QUERIES` of ``n``
    (default :func:`evaluated_size`), each with ``retriever.k`` passages of typical length
    (the caller scales the counts to ``n``); None when the size is unknown."""
    from madara_cli.core.records import Doc, Example

    n = evaluated_size(cfg) if n is None else n
    if n is None:
        return None
    n = min(int(n), PLACEHOLDER_QUERIES)
    k = int(cfg.retriever.k)
    text = ("placeholder passage text " * 40)[:PLACEHOLDER_DOC_CHARS]
    return [
        Example(id=f"estimate-{i}", question=f"placeholder question {i}?", answers=("placeholder",), task=str(cfg.benchmark.task),
                docs=tuple(Doc(id=f"estimate-{i}-{j}", text=f"{j} {text}", title=f"Title {i}-{j}") for j in range(k)))
        for i in range(int(n))
    ]


class Loads:
    """How the plan's walk loads a benchmark (:data:`madara_cli.experiment.walk.Load`): once
    for the whole grid (rows memoised by the benchmark's settings, split per seed as
    :func:`~madara_cli.data.splits.load_splits` splits them; a failed load fails again
    without a retry), and :meth:`placeholder` queries for a benchmark not here."""

    def __init__(self) -> None:
        self._rows: dict[Node, Any] = {}  # by benchmark node
        self._splits: dict[tuple[Node, int], Any] = {}
        self.failed: Exception | None = None  # the last load that failed (what a placeholder may stand in for)

    def _load_rows(self, bench: Node):
        from madara_cli.data.splits import load_with_report

        if bench not in self._rows:
            try:
                self._rows[bench] = load_with_report(bench)
            except Exception as e:  # memoised as it was: the next cell of this benchmark fails the same way, at once
                self._rows[bench] = e
        rows = self._rows[bench]
        if isinstance(rows, Exception):
            self.failed = rows
            raise rows
        return rows

    def load(self, cfg: Settings, split: str = "eval", n: int | None = None):
        from madara_cli.data.splits import Splits
        from madara_cli.data.splits import split as split_rows
        from madara_cli.experiment.examples import SPLITS, CellExamples

        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        bench = cfg.benchmark if n is None else cfg.benchmark.merged({"calibration": int(n)})
        key = bench
        seed = int(cfg.seed)
        if (key, seed) not in self._splits:
            examples, report = self._load_rows(bench)
            evaluated, calibration = split_rows(examples, bench.sample, bench.calibration, seed, bench.get("calibration_split", "nested"))
            self._splits[(key, seed)] = Splits(evaluated, calibration, report)
        loaded = self._splits[(key, seed)]
        if split == "eval":
            chosen = loaded.evaluated[: int(cfg.limit)] if cfg.limit is not None else loaded.evaluated
        else:
            chosen = loaded.calibration
        return CellExamples(chosen, loaded.calibration, loaded.report)

    @staticmethod
    def placeholder(cfg: Settings, split: str = "eval", n: int | None = None):
        """Placeholder queries for ``cfg``'s benchmark, standing for the evaluated and
        calibration sizes it would hold (``CellExamples.sizes``); None when its size is unknown."""
        from madara_cli.data.splits import LoadReport
        from madara_cli.experiment.examples import CellExamples

        size = evaluated_size(cfg)
        if size is None:
            return None
        held_cal = _calibration_size(cfg, n)
        if split == "calibration":
            exs = placeholder_examples(cfg, held_cal)
            return CellExamples(exs, exs, LoadReport(), sizes=(held_cal, held_cal))
        exs = placeholder_examples(cfg, size)
        cal = placeholder_examples(cfg, held_cal)  # the calibration split is nested in the evaluated one (its first queries)
        return CellExamples(exs, cal, LoadReport(), sizes=(size, held_cal))
