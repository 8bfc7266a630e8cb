"""``madara plan``: what a grid (or one cell) will cost before it runs, and what it cost after.

Every cell goes through the pipeline's one walk (:func:`madara_cli.experiment.walk.prepare_cell`;
a routed cell's probe through :func:`~madara_cli.experiment.walk.prepare_probe`) on the real
examples and retrieved documents, its strategy running on engines that record the requests
instead of sending them (:class:`_Recorder`, from :class:`Recorders`). A recorder answers with
a placeholder derived from the request's hash (a parseable score, a distinct answer) only so
the walk continues with realistic variety; no placeholder is stored, reported or cached where
a run can see it (a routed cell's placeholder probe goes to a scratch results folder). The
requests, keyed as the response cache keys them, give (:mod:`~madara_cli.experiment.plan_counts`):

* ``requests`` each strategy makes; ``calls``, the engine calls once work shared through the
  cache is counted once (3-Agent, SDA, ATF, RRF and PDE share the base scores), ``cached``
  of them already in the real response cache;
* prompt tokens (characters / 4, the rule of thumb for English BPE) and the most output
  tokens (each chat request's ``max_tokens``; a score request reads one token);
* a routed (``madara``) cell's RSC probe on the calibration split apart (``probe_requests``:
  it runs once before the treatment);
* the uncached calls' engine time at :mod:`madara_cli.experiment.engine_time`'s rates
  (measured here, by ``madara bench``, or a labelled prior: ``calibrations`` names each);
* each strategy's own requests per query, the agents' scoring apart
  (:meth:`StrategyPlan.per_query`), beside Table 18's (:func:`paper_calls_per_query`).

A benchmark whose data is not here is counted on placeholder queries at its known evaluated
size (:data:`KNOWN_SIZES`: CONFLICTS has 458 queries, not ``benchmark.sample``'s cap of 1,000).
A finished cell costs nothing more: its calls, tokens and time count zero, its measured
numbers beside them. Requests that depend on model outputs (the documents a filter keeps, the
answers MAIN-RAG's judge sees, the RSC chains) are counted on placeholder outputs: their
number is right, not their content, so whether two strategies send an identical final prompt
is only estimated. A routed cell uses a finished probe when one exists, else the placeholder
probe's route. A reranking retriever does not rank with a recorder (its ranking would be
frozen in the snapshot): its first stage stands in for it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.config.identity import Cell, request_key
from madara_cli.config.keys import probed
from madara_cli.config.settings import Node, Settings
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.experiment.engine_time import Calibration, calibrate
from madara_cli.experiment.plan_counts import KNOWN_SIZES, Loads, Plan, StrategyPlan
from madara_cli.experiment.plan_counts import format_per_query as format_per_query  # the plan's names, imported from here too
from madara_cli.experiment.plan_counts import paper_calls_per_query as paper_calls_per_query
from madara_cli.experiment.plan_counts import within as within

WALK_BLOCK = 1000  # queries a plan walks at a time (see Planner.walk)


@dataclass(frozen=True)
class _Note:
    """One recorded request: its prompt's characters, its kind as the cache files it, its reply's most tokens."""

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
            # Distinct per request and a score to every agent: downstream requests
            # (selections, chains, answers) vary as in a run instead of collapsing into one.
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
    """The recorders' response cache, holding nothing: a placeholder reply is a function of its request."""

    path = Path("(plan: no cache)")

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        return {}

    def put_many(self, fingerprint: str, kind: str, items: Sequence[tuple[str, Completion]]) -> None:
        pass

    def close(self) -> None:
        pass


class Recorders:
    """The plan's engine source (:class:`~madara_cli.strategies.context.EngineSource`): one
    recording engine per fingerprint the real engine would have, computed without loading it
    (so ``cached`` counts the real response cache); they do not answer, so the walk never ranks with them."""

    answers = False

    def __init__(self) -> None:
        self._by_engine: dict[str, CachedLLM] = {}
        self._fingerprints: dict[tuple, str] = {}  # by (model, backend, seed): what the engine's fingerprint reads

    def fingerprint(self, cfg: Settings) -> str:
        engine = (cfg.model, cfg.backend, cfg.seed)
        if engine not in self._fingerprints:
            self._fingerprints[engine] = _fingerprint(cfg)
        return self._fingerprints[engine]

    def get(self, cfg: Settings) -> CachedLLM:
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


def _fingerprint(cfg: Settings) -> str:
    """The fingerprint the real engine would use, without loading it: the backend record's own."""
    from madara_cli.backends import backend_fingerprint

    return backend_fingerprint(cfg)


@dataclass
class _Counted:
    """One walk's engine calls (a strategy's, or a routed cell's probe), for :meth:`Planner.account`."""

    fingerprint: str
    cache: str  # the real response cache's path
    calibration: Calibration | None  # this engine's, when the walker that recorded this met it first
    scale: float
    recorded: list[tuple[str, _Note]]


@dataclass
class CellWalk:
    """What walking one cell found (:meth:`Planner.walk`): all the plan counts of it, so a
    process other than its walker (:func:`plan_cells`) can count it in grid order."""

    cell: Cell
    finished: dict[str, float] | None = None  # a finished cell's measured accounting
    estimated: bool = False
    notes: list[str] = field(default_factory=list)
    adds: dict[str, float] = field(default_factory=dict)  # StrategyPlan fields to add to
    counted: list[_Counted] = field(default_factory=list)


class Planner:
    """One plan across its cells: :meth:`walk` walks a cell, :meth:`account` counts it in grid
    order (calls once across the grid, the real cache's share); :meth:`cell` does both."""

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

    def scratch_cfg(self, cfg: Settings) -> Settings:
        """``cfg`` writing to the scratch folder, untracked, without prompt logs (where a routed cell's
        placeholder probe may go), seeded with the real finished probes so a finished one is found there too."""
        real = Path(str(cfg.results_dir))
        probes = real / "probes"
        if str(real) not in self._seeded:
            self._seeded.add(str(real))
            if probes.is_dir():
                shutil.copytree(probes, self.scratch / "results" / "probes", dirs_exist_ok=True)
        return cfg.merged({"results_dir": str(self.scratch / "results"), "log_samples": False, "logger": {"name": "none"}})

    def real_cache(self, path: str) -> ResponseCache | None:
        """The real response cache at ``path`` (resolved), opened once; None where there is none."""
        if path not in self.real_caches:
            self.real_caches[path] = ResponseCache(path) if Path(path).is_file() else None
        return self.real_caches[path]

    def cell(self, cfg: Settings) -> None:
        """Walk the cell ``cfg`` and count it."""
        walked = self.walk(cfg)
        assert walked is not None  # only a walker defers
        self.account(walked)

    def walk(self, cfg: Settings) -> CellWalk | None:
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
            # Only the benchmark's own data may be missing, and not a file the user named:
            # estimating around a typo would plan for data that does not exist.
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

    def _estimate_note(self, cfg: Settings, e: Exception, fallback) -> str:
        n = fallback.n_examples
        known = KNOWN_SIZES.get(str(cfg.benchmark.name))
        size = f"its known size {known}" if known is not None and n == known else "limit, else benchmark.sample"
        return (f"{cfg.benchmark.name}: data not here ({re.split(r'[:;]', str(e))[0]}): estimated for {n} queries × k={cfg.retriever.k} "
                f"documents ({size}) from {len(fallback.examples)} placeholder queries")

    def _probe(self, walked: CellWalk, cfg: Settings, ctx_cfg: Node, estimated: bool) -> None:
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

    def _strategy(self, walked: CellWalk, prepared, ctx_cfg: Node, scale: float, routed: bool) -> None:
        from madara_cli.strategies import StrategyContext

        llm = self.engines.get(prepared.cfg)
        examples = prepared.examples
        with llm.fresh_accounting() as acct:
            if routed:
                prepared.strategy(StrategyContext(llm=llm, cfg=ctx_cfg), examples)  # probe read back, one route
            else:
                # A query's requests depend on it alone: a block at a time holds one block's
                # rendered prompts, not the whole benchmark's (docs/benchmarks.md).
                for i in range(0, len(examples), WALK_BLOCK):
                    prepared.strategy(StrategyContext(llm=llm, cfg=ctx_cfg), examples[i:i + WALK_BLOCK])
        _add(walked.adds, requests=round(acct.total().requests * scale), queries=round(len(examples) * scale),
             scoring_requests=round(sum(v.requests for k, v in acct.by_stage.items() if k.startswith("score")) * scale))
        walked.counted.append(self._recorded(prepared.cfg, scale))

    def _recorded(self, cfg: Settings, scale: float) -> _Counted:
        """The engine calls the last walk recorded, with the engine's calibration when this walker first meets it."""
        llm = self.engines.get(cfg)
        fp = llm.backend.fingerprint
        cache = str(Path(str(cfg.cache)).resolve())
        calibration = None
        if fp not in self._calibrated:
            calibration = self._calibrated[fp] = calibrate(cfg, fp, self.real_cache(cache), self.rate)
        return _Counted(fp, cache, calibration, scale, list(llm.backend.take().items()))  # type: ignore[attr-defined]

    def account(self, walked: CellWalk) -> None:
        """Count one walked cell in grid order: its calls once across the grid, the real cache's share
        apart (its replies teach the calibration their share of the budget), the rest priced in :meth:`finish`."""
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


def plan_grid(grid_name: str, cfgs: list[Settings], rate: float | None = None,
              progress: Callable[[int, int], None] | None = None) -> Plan:
    """Estimate every cell of a grid (measured numbers for finished ones). ``rate``: engine calls per
    second for the uncached calls (else :mod:`~madara_cli.experiment.engine_time`'s calibration);
    ``progress(done, total)`` is told after each cell."""
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




# A grid of this many cells or more is planned in several processes (plan_jobs): below it, starting them costs more than they save.
PARALLEL_FROM = 200
_WALKER: Planner | None = None  # in a walker process: its own planner (plan_cells)


def plan_jobs(n_cells: int, jobs: int | None = None) -> int:
    """How many processes plan ``n_cells`` cells: ``jobs``, between 1 and the machine's CPUs (more only take
    turns: ``-j 100000`` forked until the machine crawled); else, where processes fork (Linux) and the grid
    has :data:`PARALLEL_FROM` cells or more, one per CPU this process may use, up to 8; else 1."""
    if jobs is not None:
        return max(1, min(int(jobs), os.cpu_count() or 1))
    if n_cells < PARALLEL_FROM or sys.platform != "linux":
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8, n_cells // (PARALLEL_FROM // 2)))


def plan_cells(grid_name: str, cells: list[list[str]], rate: float | None = None, jobs: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> Plan:
    """:func:`plan_grid` of the cells these overrides compose, in :func:`plan_jobs` processes: walkers
    forked from this one (its plug-ins, config folders and remembered compositions) compose and walk
    blocks of cells, and this process counts each walk in grid order, so the plan is one process's.
    A routed cell (its probe is the grid's: a later cell of its model and benchmark finds it) and any
    cell a walker could not walk are walked here, where an error is raised as one process raises it."""
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
    """``jobs`` walker processes, ended with the block however it ends: forked with Ctrl-C and SIGTERM
    held back, so none runs this process's handlers (a worker's traceback) and an interrupt while
    they start comes after the pool exists to be terminated."""
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
    """A walker starts (forked inside the parent's ``held_state``): its own planner and scratch folder
    under the parent's; Ctrl-C is the parent's to answer, SIGTERM or the parent's end, however it ends
    (PR_SET_PDEATHSIG), end it at once. What it inherited is frozen out of the garbage collector's
    passes (alive for its life), and young objects are collected less often (5% of its time went there)."""
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
    """Compose and walk each cell of ``block`` in a walker; None for a cell the parent walks (routed, or failed here)."""
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


