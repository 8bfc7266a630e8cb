"""``madara plan``: what a grid (or one cell) will cost before it runs, and what it cost after.

Every cell goes through the pipeline's one walk (:func:`madara_cli.experiment.walk.prepare_cell`;
a routed cell's probe through :func:`~madara_cli.experiment.walk.prepare_probe`) on the
real examples and retrieved documents, and then its strategy runs on engines that record
the requests instead of sending them (:class:`_Recorder`, handed out by :class:`Recorders`).
A recorder answers each request with a placeholder reply derived from the request's hash
(a parseable score, a distinct answer) purely so the walk can continue with realistic
variety; its replies are never stored, reported or cached anywhere a run can see (a
routed cell's placeholder probe goes to a scratch results folder). What it records are
the requests themselves, keyed exactly as the response cache keys them, so the plan knows:

* the requests each strategy makes (``requests``),
* the engine calls the grid needs once work shared through the cache is counted
  once (``calls``; e.g. 3-Agent, SDA, ATF, RRF and PDE share the base scores),
* how many of those the real response cache already holds (``cached``),
* the prompt tokens (characters / 4, the usual rule of thumb for English BPE) and
  the most output tokens the calls may generate (each chat request's ``max_tokens``;
  a score request reads one next token),
* a routed cell's (``madara``) RSC probe on the calibration split, counted apart
  (``probe_requests``) because it runs once before the treatment,
* the engine time of the uncached calls, from their prompt tokens and output budgets
  at the rates of :mod:`madara_cli.experiment.engine_time` (measured here, by ``madara
  bench``, or a labelled prior; each engine's calibration is named in ``calibrations``),
* each strategy's own requests per query, the agents' scoring apart
  (:meth:`StrategyPlan.per_query`), beside Table 18's calls per query
  (:func:`paper_calls_per_query`).

What is plan's own and nothing else: the recorder, the counting, the placeholder
queries of a benchmark whose data is not here yet (counted at its known evaluated
size, :data:`KNOWN_SIZES`: the paper's CONFLICTS has 458 queries, not
``benchmark.sample``'s cap of 1,000; passed into the walk as its loaded examples), and
the estimates. A cell that is already finished costs nothing more: the walk returns it
finished, its calls, tokens and time count zero and its measured numbers stand beside
them.

Requests that depend on model outputs (the documents a filter keeps, the answers
MAIN-RAG's judge sees, the RSC chains) are counted with the placeholder outputs:
their number is right, their content is not, so whether two strategies happen to
send an identical final prompt is only estimated. Routed cells (``madara``) use a
finished probe when one exists, else the route the placeholder probe gives. A
reranking retriever does not rank with a recorder (its ranking would be frozen in the
snapshot): its first stage stands in for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from omegaconf import DictConfig, OmegaConf

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.config.identity import Cell, request_key
from madara_cli.config.keys import probed, to_plain
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.experiment.engine_time import Calibration, calibrate

WALK_BLOCK = 1000  # queries a plan walks at a time (see Planner.walk)


@dataclass(frozen=True)
class _Note:
    """One recorded request: its prompt's characters, its kind as the cache files it, and
    the most tokens its reply may hold (a score request reads one)."""

    chars: int
    kind: str
    budget: int


class _Recorder:
    """Stands in for an engine while a plan walks the strategies (see module doc)."""

    name = "plan"

    def __init__(self, fingerprint: str):
        self._fingerprint = fingerprint
        self.seen: dict[str, _Note] = {}  # key -> note, in the order first asked, since the last take()

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def batch_size(self) -> int:
        return 1 << 30

    def take(self) -> dict[str, _Note]:
        """The requests recorded since the last call (each once)."""
        seen, self.seen = self.seen, {}
        return seen

    def _note(self, r: ChatRequest | ScoreRequest) -> str:
        key = request_key(self._fingerprint, r)
        if key not in self.seen:
            chars = sum(len(m.content) for m in r.messages) + len(getattr(r, "prefix", "") or "")
            score = isinstance(r, ScoreRequest)
            self.seen[key] = _Note(chars, "score" if score else "chat", 1 if score else int(getattr(r, "max_tokens", 0) or 0))
        return key

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out = []
        for r in requests:
            key = self._note(r)
            h = int(key[:12], 16)
            # Distinct per request, and readable as a score by every agent, so that
            # downstream requests (selections, chains, answers) vary as they would in a
            # run instead of collapsing into one.
            steps = f'["The document is relevant ({key[:8]}).", "It is reliable.", "Score of {h % 6}."]'
            out.append(Completion(text=f'{{"reasoning_steps": {steps}, "score": {h % 6}, "adjustment": {h % 5 - 2}}} placeholder {key[:8]}'))
        return out

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        out = []
        for r in requests:
            h = int(self._note(r)[:12], 16)
            out.append(Completion(text="", logprobs={c: -float((h >> (3 * i)) % 7) for i, c in enumerate(r.candidates)}))
        return out

    def close(self) -> None:
        pass


class _NoStore:
    """The recorders' response cache: holds nothing (a placeholder reply is a function of
    its request, so asking again gives the same one; a plan of many cells keeps no reply)."""

    path = Path("(plan: no cache)")

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        return {}

    def put_many(self, fingerprint: str, kind: str, items: Sequence[tuple[str, Completion]]) -> None:
        pass

    def close(self) -> None:
        pass


class Recorders:
    """The plan's engine source (:class:`~madara_cli.strategies.context.EngineSource`):
    one recording engine per engine fingerprint, the fingerprint the real engine would
    have, computed without loading it (so ``cached`` counts what the real response cache
    holds). Its engines do not answer (``answers``), so the walk never ranks with them."""

    answers = False

    def __init__(self) -> None:
        self._by_engine: dict[str, CachedLLM] = {}
        self._fingerprints: dict[str, str] = {}
        self._last: tuple[DictConfig, str] | None = None

    def fingerprint(self, cfg: DictConfig) -> str:
        if self._last is not None and self._last[0] is cfg:  # a cell asks several times in a row
            return self._last[1]
        fp = self._fingerprint_of(cfg)
        self._last = (cfg, fp)
        return fp

    def _fingerprint_of(self, cfg: DictConfig) -> str:
        engine = json.dumps([to_plain(cfg.model), to_plain(cfg.backend), cfg.seed], sort_keys=True, default=str)
        if engine not in self._fingerprints:
            self._fingerprints[engine] = _fingerprint(cfg)
        return self._fingerprints[engine]

    def get(self, cfg: DictConfig) -> CachedLLM:
        fp = self.fingerprint(cfg)
        if fp not in self._by_engine:
            self._by_engine[fp] = CachedLLM(_Recorder(fp), _NoStore())  # type: ignore[arg-type]
        return self._by_engine[fp]

    def engines(self) -> list[CachedLLM]:
        """The recording engines handed out so far."""
        return list(self._by_engine.values())


def _add(adds: dict[str, float], **more: float) -> None:
    for name, value in more.items():
        adds[name] = adds.get(name, 0) + value


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
        """(scoring requests, other requests) per evaluated query: the strategy's own
        calls, what Table 18's note counts, a routed cell's one-time probe apart
        (``None`` without queries)."""
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


def _fingerprint(cfg: DictConfig) -> str:
    """The fingerprint the real engine would use, without loading it: the backend record's own."""
    from madara_cli.backends import backend_fingerprint

    return backend_fingerprint(cfg)


# Evaluated queries of the benchmarks whose whole set is smaller than benchmark.sample's
# cap, for counting before their data is here. CONFLICTS (Cattan et al. 2025): the
# paper's Appendix B.2 ("On CONFLICTS (Qwen2.5-7B, 458 queries)") and
# configs/benchmark/conflicts.yaml. The others the paper samples at ~1K (§5.1: FEVER,
# TriviaQA; their sets are far larger) or at benchmark.sample (MuSiQue: 100, Table 6).
KNOWN_SIZES = {"conflicts": 458}


def evaluated_size(cfg: DictConfig) -> int | None:
    """Queries a cell evaluates when its data is not here: ``limit``, else
    ``benchmark.sample``, each capped by the benchmark's known size; None when unknown."""
    n = cfg.limit if cfg.limit is not None else cfg.benchmark.sample
    known = KNOWN_SIZES.get(str(cfg.benchmark.name))
    if n is None:
        return known
    return min(int(n), known) if known is not None else int(n)


def _calibration_size(cfg: DictConfig, n: int | None = None) -> int:
    """Calibration queries the benchmark holds when its data is not here: the split asked
    for (``n``, else ``benchmark.calibration``), capped by its known size."""
    wanted = int(n if n is not None else cfg.benchmark.calibration)
    known = KNOWN_SIZES.get(str(cfg.benchmark.name))
    return min(wanted, known) if known is not None else wanted


class Loads:
    """How the plan's walk loads a benchmark (:data:`madara_cli.experiment.walk.Load`):
    each benchmark once for the whole grid (its rows are memoised by the benchmark's
    settings, and split per seed as :func:`~madara_cli.data.splits.load_splits` splits
    them; a load that failed fails again without a retry), and, for a benchmark whose data
    is not here, the placeholder queries the plan counts instead (:meth:`placeholder`)."""

    def __init__(self) -> None:
        self._rows: dict[str, Any] = {}
        self._splits: dict[tuple[str, int], Any] = {}
        self.failed: Exception | None = None  # the last load that failed (what a placeholder may stand in for)

    def _load_rows(self, key: str, bench: DictConfig):
        from madara_cli.data.splits import load_with_report

        if key not in self._rows:
            try:
                self._rows[key] = load_with_report(bench)
            except Exception as e:  # memoised as it was: the next cell of this benchmark fails the same way, at once
                self._rows[key] = e
        rows = self._rows[key]
        if isinstance(rows, Exception):
            self.failed = rows
            raise rows
        return rows

    def load(self, cfg: DictConfig, split: str = "eval", n: int | None = None):
        from madara_cli.data.splits import Splits
        from madara_cli.data.splits import split as split_rows
        from madara_cli.experiment.examples import SPLITS, CellExamples

        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        bench = cfg.benchmark if n is None else OmegaConf.merge(cfg.benchmark, {"calibration": int(n)})
        key = json.dumps(to_plain(bench), sort_keys=True, default=str)
        seed = int(cfg.seed)
        if (key, seed) not in self._splits:
            examples, report = self._load_rows(key, bench)
            evaluated, calibration = split_rows(examples, bench.sample, bench.calibration, seed, bench.get("calibration_split", "nested"))
            self._splits[(key, seed)] = Splits(evaluated, calibration, report)
        loaded = self._splits[(key, seed)]
        if split == "eval":
            chosen = loaded.evaluated[: int(cfg.limit)] if cfg.limit is not None else loaded.evaluated
        else:
            chosen = loaded.calibration
        return CellExamples(chosen, loaded.calibration, loaded.report)

    @staticmethod
    def placeholder(cfg: DictConfig, split: str = "eval", n: int | None = None):
        """Placeholder queries for ``cfg``'s benchmark (its data is not here): up to
        :data:`PLACEHOLDER_QUERIES` queries, standing for the evaluated and calibration
        sizes the benchmark would hold (``CellExamples.sizes``); None when its size is
        unknown."""
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
        # The calibration split is nested in the evaluated one (its first queries).
        cal = placeholder_examples(cfg, held_cal)
        return CellExamples(exs, cal, LoadReport(), sizes=(size, held_cal))


@dataclass
class _Counted:
    """One walk's engine calls (a strategy's, or a routed cell's probe), as the grid-wide
    count needs them (:meth:`Planner.account`)."""

    fingerprint: str
    cache: str  # the real response cache's path
    calibration: Calibration | None  # this engine's, when the walker that recorded this met it first
    scale: float
    recorded: list[tuple[str, _Note]]


@dataclass
class CellWalk:
    """What walking one cell found (:meth:`Planner.walk`): everything the plan counts of
    it, so that it can be counted in grid order by another process than the one that
    walked it (a plan's walkers: :func:`plan_cells`)."""

    cell: Cell
    finished: dict[str, float] | None = None  # a finished cell's measured accounting
    estimated: bool = False
    notes: list[str] = field(default_factory=list)
    adds: dict[str, float] = field(default_factory=dict)  # StrategyPlan fields to add to
    counted: list[_Counted] = field(default_factory=list)


class Planner:
    """The state of one plan across its cells (see the module docstring): :meth:`walk`
    walks a cell, :meth:`account` counts the walk in grid order (calls once across the
    grid, the real cache's share); :meth:`cell` does both."""

    def __init__(self, grid_name: str, rate: float | None = None, scratch: Path | None = None):
        self.plan = Plan(grid=grid_name)
        self.rate = rate
        self.engines = Recorders()
        self.loads = Loads()
        if scratch is not None:
            scratch.mkdir(parents=True, exist_ok=True)
        self.scratch = scratch if scratch is not None else Path(tempfile.mkdtemp(prefix="madara-plan-"))
        self.seen_keys: set[str] = set()
        self.real_caches: dict[str, ResponseCache | None] = {}
        self.calibrations: dict[str, Calibration] = {}  # the plan's, in grid order
        self._calibrated: dict[str, Calibration] = {}  # those this walker worked out
        # strategy -> (engine, kind, output budget) -> [uncached calls, their prompt characters]
        self.uncached: dict[str, dict[tuple[str, str, int], list[float]]] = {}
        self._seeded: set[str] = set()
        self.defer_routed = False  # a walker: a routed cell is left to the parent (its probe is the grid's)

    def close(self) -> None:
        for c in self.real_caches.values():
            if c is not None:
                c.close()
        self.real_caches = {}
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- configs -------------------------------------------------------------------

    def scratch_cfg(self, cfg: DictConfig) -> DictConfig:
        """``cfg`` with its results in the scratch folder, untracked and without prompt
        logs: where a walk on placeholder replies may write (a routed cell's probe), seeded
        with the real finished probes so that a finished one is found there too."""
        real = Path(str(cfg.results_dir))
        probes = real / "probes"
        if str(real) not in self._seeded:
            self._seeded.add(str(real))
            if probes.is_dir():
                shutil.copytree(probes, self.scratch / "results" / "probes", dirs_exist_ok=True)
        return OmegaConf.merge(cfg, {"results_dir": str(self.scratch / "results"), "log_samples": False, "logger": {"name": "none"}})

    def real_cache(self, path: str) -> ResponseCache | None:
        """The real response cache at ``path`` (resolved), opened once; None where there is none."""
        if path not in self.real_caches:
            self.real_caches[path] = ResponseCache(path) if Path(path).is_file() else None
        return self.real_caches[path]

    # -- one cell ------------------------------------------------------------------

    def cell(self, cfg: DictConfig) -> None:
        """Walk the cell ``cfg`` and count it."""
        walked = self.walk(cfg)
        assert walked is not None  # only a walker defers
        self.account(walked)

    def walk(self, cfg: DictConfig) -> CellWalk | None:
        """Walk the cell ``cfg``; what it found, to :meth:`account` (None: a routed cell
        that a walker leaves to the parent, ``defer_routed``)."""
        from madara_cli.core.errors import DataError, RecordError
        from madara_cli.experiment.walk import CellResult, prepare_cell

        estimated = False
        notes: list[str] = []
        self.loads.failed = None
        try:
            try:
                prepared = prepare_cell(cfg, self.engines, load=self.loads.load)
            except RecordError:  # an unreadable finished record: estimated like an unfinished cell
                prepared = prepare_cell(cfg, self.engines, load=self.loads.load, force=True)
        except DataError as e:
            fallback = self.loads.placeholder(cfg)
            # Only the benchmark's own data may be missing; and a file the user named is
            # there to be read: estimating around a typo would report a plan for data that
            # does not exist.
            if e is not self.loads.failed or fallback is None or cfg.benchmark.get("path"):
                raise
            notes.append(self._estimate_note(cfg, e, fallback))
            estimated = True
            prepared = prepare_cell(self.scratch_cfg(cfg), self.engines, loaded=fallback, force=True)
        if isinstance(prepared, CellResult):
            record = prepared.record
            acct = record.accounting
            return CellWalk(prepared.cell, finished={"requests": int(acct.get("requests", 0)), "calls": int(acct.get("calls_issued", 0)),
                                                     "seconds": record.engine_seconds, "wall": float(record.seconds or 0.0)})
        routed = probed(prepared.cfg)
        if routed and self.defer_routed:
            return None
        cell = prepared.ident.cell
        walked = CellWalk(cell, estimated=estimated, notes=notes)
        from madara_cli.plugins.catalog import CATALOG

        rspec = CATALOG.find("retriever", str(prepared.cfg.retriever.name))
        if rspec is not None and rspec.uses_engine:
            notes.append(f"{cell.key}: its retriever asks the engine about each candidate on first retrieval (not counted)")
        scale = (fallback.n_examples / max(len(prepared.examples), 1)) if estimated else 1.0
        # Strategies write nothing; a routed cell writes its probe, and goes to the scratch folder.
        ctx_cfg = self.scratch_cfg(prepared.cfg) if routed and not estimated else prepared.cfg
        if routed:
            self._probe(walked, prepared.cfg, ctx_cfg, estimated)
        self._strategy(walked, prepared, ctx_cfg, scale, routed)
        return walked

    def _estimate_note(self, cfg: DictConfig, e: Exception, fallback) -> str:
        n = fallback.n_examples
        known = KNOWN_SIZES.get(str(cfg.benchmark.name))
        size = f"its known size {known}" if known is not None and n == known else "limit, else benchmark.sample"
        return (f"{cfg.benchmark.name}: data not here ({re.split(r'[:;]', str(e))[0]}): estimated for {n} queries × k={cfg.retriever.k} "
                f"documents ({size}) from {len(fallback.examples)} placeholder queries")

    def _probe(self, walked: CellWalk, cfg: DictConfig, ctx_cfg: DictConfig, estimated: bool) -> None:
        """A routed cell's RSC probe, walked on its own (through the walk's probe step) so
        that it is counted at the calibration split's size, before the treatment reads it."""
        from madara_cli.diagnose.probe import find_or_run_probe
        from madara_cli.experiment.walk import prepare_probe

        if cfg.strategy.get("probe"):
            return  # a pinned probe: nothing to run
        if estimated:
            fallback = self.loads.placeholder(cfg, "calibration")
            prepared = prepare_probe(cfg, self.engines, load=lambda *_a, **_k: fallback)
            scale = fallback.n_examples / max(len(fallback.examples), 1)
        else:
            prepared = prepare_probe(cfg, self.engines, load=self.loads.load)
            scale = 1.0
        if prepared.examples is None:
            return  # finished: the treatment reads it
        llm = self.engines.get(cfg)
        with llm.fresh_accounting() as acct:
            find_or_run_probe(ctx_cfg, llm, examples=prepared.examples, spec=prepared.ident)
        n = round(acct.total().requests * scale)
        _add(walked.adds, probe_requests=n, requests=n)
        walked.counted.append(self._recorded(cfg, scale))

    def _strategy(self, walked: CellWalk, prepared, ctx_cfg: DictConfig, scale: float, routed: bool) -> None:
        from madara_cli.strategies import StrategyContext

        llm = self.engines.get(prepared.cfg)
        examples = prepared.examples
        with llm.fresh_accounting() as acct:
            if routed:
                prepared.strategy(StrategyContext(llm=llm, cfg=ctx_cfg), examples)  # probe read back, one route
            else:
                # Each query's requests depend on that query alone, so the walk goes a
                # block of queries at a time: one block's rendered prompts are held at
                # once, not the whole benchmark's (docs/benchmarks.md).
                for i in range(0, len(examples), WALK_BLOCK):
                    prepared.strategy(StrategyContext(llm=llm, cfg=ctx_cfg), examples[i:i + WALK_BLOCK])
        _add(walked.adds, requests=round(acct.total().requests * scale), queries=round(len(examples) * scale),
             scoring_requests=round(sum(v.requests for k, v in acct.by_stage.items() if k.startswith("score")) * scale))
        walked.counted.append(self._recorded(prepared.cfg, scale))

    def _recorded(self, cfg: DictConfig, scale: float) -> _Counted:
        """The engine calls the last walk recorded, with this engine's calibration the
        first time this walker meets it (it reads the real cache's timings)."""
        llm = self.engines.get(cfg)
        fp = llm.backend.fingerprint
        cache = str(Path(str(cfg.cache)).resolve())
        calibration = None
        if fp not in self._calibrated:
            calibration = self._calibrated[fp] = calibrate(cfg, fp, self.real_cache(cache), self.rate)
        return _Counted(fp, cache, calibration, scale, list(llm.backend.take().items()))  # type: ignore[attr-defined]

    # -- counting, in grid order -----------------------------------------------------

    def account(self, walked: CellWalk) -> None:
        """Count one walked cell, in grid order: its calls once across the grid, the real
        cache's share apart (its replies teach the calibration what this engine's replies
        use of their budget), the rest priced later (:meth:`finish`)."""
        self.plan.cells.append(walked.cell)
        sp = self.plan.by_strategy.setdefault(walked.cell.strategy, StrategyPlan())
        sp.cells += 1
        for note in walked.notes:
            if note not in self.plan.notes:
                self.plan.notes.append(note)
        if walked.finished is not None:
            sp.finished_cells += 1
            sp.measured_cells += 1
            sp.measured_requests += int(walked.finished["requests"])
            sp.measured_calls += int(walked.finished["calls"])
            sp.measured_seconds += float(walked.finished["seconds"])
            sp.measured_wall_seconds += float(walked.finished.get("wall", 0.0))
            return
        sp.estimated_cells += int(walked.estimated)
        for name, value in walked.adds.items():
            setattr(sp, name, getattr(sp, name) + value)
        for counted in walked.counted:
            self._count(sp, walked.cell.strategy, counted)

    def _count(self, sp: StrategyPlan, strategy: str, counted: _Counted) -> None:
        fp, scale = counted.fingerprint, counted.scale
        fresh = [(k, note) for k, note in counted.recorded if k not in self.seen_keys]
        self.seen_keys.update(k for k, _ in fresh)
        cache = self.real_cache(counted.cache)
        if fp not in self.calibrations and counted.calibration is not None:
            self.calibrations[fp] = counted.calibration
        calibration = self.calibrations[fp]
        in_cache = cache.get_many([k for k, _ in fresh]) if cache is not None and fresh else {}
        sp.calls += round(len(fresh) * scale)
        sp.cached += len(in_cache)
        sp.prompt_tokens += round(sum(note.chars for _, note in fresh) * scale) // 4
        buckets = self.uncached.setdefault(strategy, {})
        for k, note in fresh:
            done = in_cache.get(k)
            if done is not None:
                calibration.observed.add(note.chars, note.budget, note.kind, done.tokens_in, done.tokens_out)
                continue
            sp.output_tokens += round(note.budget * scale)
            bucket = buckets.setdefault((fp, note.kind, note.budget), [0.0, 0.0])
            bucket[0] += scale
            bucket[1] += note.chars * scale

    # -- the end -------------------------------------------------------------------

    def finish(self) -> Plan:
        """Price the uncached calls now that every cached reply was seen."""
        for strategy, buckets in self.uncached.items():
            sp = self.plan.by_strategy[strategy]
            for (fp, kind, budget), (calls, chars) in buckets.items():
                seconds = self.calibrations[fp].seconds(kind, budget, calls, chars)
                if seconds is not None:
                    sp.seconds += seconds
                    sp.timed_calls += calls
        self.plan.calibrations = list(self.calibrations.values())
        return self.plan


def _check_rate(rate: float | None) -> None:
    if rate is not None and not (rate > 0):
        raise ValueError(f"--rate {rate}: a throughput in engine calls per second must be > 0")


def plan_grid(grid_name: str, cfgs: list[DictConfig], rate: float | None = None,
              progress: Callable[[int, int], None] | None = None) -> Plan:
    """Estimate every cell of a grid (or of one cell); add measured numbers for finished
    cells. ``rate``: engine calls per second to time the uncached calls at (else the
    calibration of :mod:`madara_cli.experiment.engine_time`). ``progress(done, total)`` is told
    after each cell."""
    _check_rate(rate)
    from madara_cli.config.folders import holding_files

    planner = Planner(grid_name, rate)
    try:
        with holding_files():  # the config folders and prompt sets as the plan found them, looked up once
            for i, cfg in enumerate(cfgs, 1):
                planner.cell(cfg)
                if progress is not None:
                    progress(i, len(cfgs))
        return planner.finish()
    finally:
        planner.close()


# A retrieved passage's length in characters (FlashRAG's 100-word Wikipedia chunks).
PLACEHOLDER_DOC_CHARS = 600
PLACEHOLDER_QUERIES = 20  # walked; counts scale linearly to the configured size


# A grid of this many cells or more is planned in several processes (plan_jobs): below
# it, starting them costs more than they save.
PARALLEL_FROM = 200
_WALKER: Planner | None = None  # in a walker process: its own planner (plan_cells)


def plan_jobs(n_cells: int, jobs: int | None = None) -> int:
    """How many processes plan ``n_cells`` cells: ``jobs`` when given, at least 1 and at
    most the machine's CPUs (more walkers only take turns: ``-j 100000`` forked until
    the machine crawled); else, where processes fork (Linux) and the grid has
    :data:`PARALLEL_FROM` cells or more, one per CPU this process may use, up to 8; else 1."""
    if jobs is not None:
        return max(1, min(int(jobs), os.cpu_count() or 1))
    if n_cells < PARALLEL_FROM or sys.platform != "linux":
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8, n_cells // (PARALLEL_FROM // 2)))


def plan_cells(grid_name: str, cells: list[list[str]], rate: float | None = None, jobs: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> Plan:
    """:func:`plan_grid` of the cells these overrides compose, each composed where it is
    walked, in :func:`plan_jobs` processes: walkers forked from this one (its plug-ins,
    config folders and remembered compositions as they are here) compose and walk blocks
    of cells, and this process counts each walk in grid order, so the plan is the one a
    single process makes. A routed cell (its probe is the grid's: a later cell of its
    model and benchmark finds it) and any cell a walker could not walk are composed and
    walked here, where an error is raised as a single process raises it."""
    _check_rate(rate)
    from madara_cli.composition import compose
    from madara_cli.composition.compose import held_state

    jobs = plan_jobs(len(cells), jobs)
    planner = Planner(grid_name, rate)
    try:
        with held_state():  # the config files, folders and prompt sets as the plan found them, read once
            if jobs == 1:
                for i, overrides in enumerate(cells, 1):
                    planner.cell(compose(overrides))
                    if progress is not None:
                        progress(i, len(cells))
                return planner.finish()
            size = max(8, min(64, len(cells) // (jobs * 16) or 1))
            blocks = [cells[i:i + size] for i in range(0, len(cells), size)]
            done = 0
            with _walkers(min(jobs, len(blocks)), (grid_name, rate, str(planner.scratch))) as pool:
                for block, walks in zip(blocks, pool.imap(_walk_block, blocks)):
                    for overrides, walked in zip(block, walks):
                        if walked is None:
                            planner.cell(compose(overrides))
                        else:
                            planner.account(walked)
                        done += 1
                        if progress is not None:
                            progress(done, len(cells))
            return planner.finish()
    finally:
        planner.close()


_STOPS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _walkers(jobs: int, initargs: tuple) -> Iterator[Any]:
    """``jobs`` walker processes, ended with the block however it ends: forked with Ctrl-C
    and SIGTERM held back, so none runs this process's handlers (a worker's traceback)
    and an interrupt while they start comes after the pool exists to be terminated."""
    import multiprocessing

    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_walker_start, initargs=(*initargs, os.getpid()))
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal held back is raised here, inside the try
        yield pool
    finally:
        pool.terminate()


def _walker_start(grid_name: str, rate: float | None, scratch: str, parent: int) -> None:
    """A walker process starts (forked inside the parent's ``held_state``): its own
    planner, its scratch folder under the parent's; Ctrl-C is the parent's to answer,
    SIGTERM ends a walker at once, and so does the parent's end, however it ends (Linux's
    parent-death signal, PR_SET_PDEATHSIG). What it inherited is frozen out of the garbage
    collector's passes (it is the parent's, alive for the walker's life), and its young
    objects are collected less often (about 5% of a walker's time went to collecting them)."""
    import ctypes
    import gc

    global _WALKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # no prctl off Linux: the pool's terminate still ends it
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the signal was asked for
        os._exit(0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    _WALKER = Planner(grid_name, rate, scratch=Path(scratch) / f"walker-{os.getpid()}")
    _WALKER.defer_routed = True


def _walk_block(block: list[list[str]]) -> list[CellWalk | None]:
    """Compose and walk each cell of ``block`` in a walker; None for a cell the parent
    walks (routed, or failed here: the parent raises the error in grid order)."""
    from madara_cli.composition import compose

    planner = _WALKER
    assert planner is not None
    out: list[CellWalk | None] = []
    for overrides in block:
        calibrated = set(planner._calibrated)
        try:
            out.append(planner.walk(compose(overrides)))
        except Exception:
            out.append(None)
            for llm in planner.engines.engines():  # what the failed walk recorded is not the next cell's
                llm.backend.take()  # type: ignore[attr-defined]
            for fp in set(planner._calibrated) - calibrated:  # nor the calibration it worked out: the next walk of that engine carries it
                del planner._calibrated[fp]
    return out


def placeholder_examples(cfg: DictConfig, n: int | None = None) -> list | None:
    """Stand-in queries when a benchmark's data is not here yet: up to
    :data:`PLACEHOLDER_QUERIES` of ``n`` queries (default :func:`evaluated_size`) with
    ``retriever.k`` passages of typical length, so a plan counts requests before anything
    is downloaded (the caller scales them to ``n``). None when the size is unknown."""
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


def paper_calls_per_query(strategy: str) -> str:
    """Table 18's note on ``strategy``'s LLM calls per query, as printed ("—" where the
    note does not name the strategy)."""
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
