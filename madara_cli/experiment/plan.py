"""``madara plan``: what a grid will cost before it runs, and what it cost after.

The estimate walks every cell's real strategy code on the real examples and
retrieved documents, with the engine replaced by :class:`_Recorder`. The recorder
answers each request with a placeholder reply derived from the request's hash (a
parseable score, a distinct answer) purely so the walk can continue with realistic
variety; its replies are never stored, reported or cached anywhere a run can see. What it records are the requests
themselves, hashed exactly as the response cache hashes them, so the plan knows:

* the requests each strategy makes (``requests``),
* the engine calls the grid needs once work shared through the cache is counted
  once (``calls``; e.g. 3-Agent, SDA, ATF, RRF and PDE share the base scores),
* how many of those the real response cache already holds (``cached``),
* the prompt tokens (characters / 4, the usual rule of thumb for English BPE) and
  the most output tokens the calls may generate (each chat request's ``max_tokens``;
  a score request reads one next token),
* a routed cell's (``madara``) RSC probe on the calibration split, counted apart
  (``probe_requests``) because it runs once before the treatment,
* the engine time, at a throughput given (``--rate``), measured in the response cache
  or by ``madara bench --only vllm``,
* each strategy's own requests per query, the agents' scoring apart
  (:meth:`StrategyPlan.per_query`), beside Table 18's calls per query
  (:func:`paper_calls_per_query`).

A cell that is already finished costs nothing more: its calls, tokens and time count
zero (its measured numbers stand beside them). A benchmark whose data is not here yet
is counted on placeholder queries at its known evaluated size (:data:`KNOWN_SIZES`:
the paper's CONFLICTS has 458 queries, not ``benchmark.sample``'s cap of 1,000).

Requests that depend on model outputs (the documents a filter keeps, the answers
MAIN-RAG's judge sees, the RSC chains) are counted with the placeholder outputs:
their number is right, their content is not, so whether two strategies happen to
send an identical final prompt is only estimated. Routed cells (``madara``) use a
finished probe when one exists, else the route the placeholder probe gives. Examples
come from :func:`madara_cli.experiment.examples.cell_examples`' own steps, without an
engine: a reranking retriever's first stage stands in for it.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition.identify import identify
from madara_cli.config.folders import strategy_impl
from madara_cli.config.identity import Cell, probed, request_key
from madara_cli.records import ChatRequest, Completion, ScoreRequest


class _Recorder:
    """Stands in for an engine while a plan walks the strategies (see module doc)."""

    name = "plan"

    def __init__(self, fingerprint: str):
        self._fingerprint = fingerprint
        self.seen: list[tuple[str, int]] = []  # (key, prompt chars)
        self.max_out: dict[str, int] = {}  # key -> the most tokens its reply may hold
        self.kinds: dict[str, str] = {}  # key -> "chat" | "score", as the cache files it

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def batch_size(self) -> int:
        return 1 << 30

    def _note(self, r: ChatRequest | ScoreRequest) -> str:
        chars = sum(len(m.content) for m in r.messages) + len(getattr(r, "prefix", ""))
        key = request_key(self._fingerprint, r)
        self.seen.append((key, chars))
        self.kinds[key] = "score" if isinstance(r, ScoreRequest) else "chat"
        self.max_out[key] = 1 if isinstance(r, ScoreRequest) else int(getattr(r, "max_tokens", 0) or 0)
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
    estimated_cells: int = 0  # cells whose data is not here: counted on placeholder queries
    seconds: float = 0.0  # engine seconds the uncached calls should take, at the rates measured in the cache
    timed_calls: float = 0.0  # uncached calls with a measured rate (``seconds`` covers only these)
    queries: int = 0  # evaluated queries over its cells
    scoring_requests: int = 0  # of ``requests``, those of the agents' scoring stages (score*)

    def per_query(self) -> tuple[float, float] | None:
        """(scoring requests, other requests) per evaluated query: the strategy's own
        calls, what Table 18's note counts, a routed cell's one-time probe apart
        (``None`` without queries)."""
        if not self.queries:
            return None
        return self.scoring_requests / self.queries, (self.requests - self.probe_requests - self.scoring_requests) / self.queries


@dataclass
class Plan:
    grid: str
    cells: list[Cell] = field(default_factory=list)
    by_strategy: dict[str, StrategyPlan] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def total(self) -> StrategyPlan:
        t = StrategyPlan()
        for s in self.by_strategy.values():
            for f in t.__dataclass_fields__:
                setattr(t, f, getattr(t, f) + getattr(s, f))
        return t


WALK_BLOCK = 1000  # queries a plan walks at a time (see plan_grid)


def _fingerprint(cfg: DictConfig) -> str:
    """The fingerprint the real engine would use, without loading it (so ``cached``
    counts what the real response cache holds): the backend record's own."""
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


def plan_grid(grid_name: str, cfgs: list[DictConfig], rate: float | None = None) -> Plan:
    """Estimate every cell of a grid; add measured numbers for finished cells.
    ``rate``: engine calls per second to time the uncached calls at (else the rates
    measured in the response cache, else ``madara bench --only vllm``'s)."""
    if rate is not None and not (rate > 0):
        raise ValueError(f"--rate {rate}: a throughput in engine calls per second must be > 0")
    from madara_cli.diagnose.probe import find_or_run_probe
    from madara_cli.errors import DataError, RecordError
    from madara_cli.experiment.examples import load_cell, retrieve_for, sized_to_data
    from madara_cli.experiment.treat import Treatment, strategy_for
    from madara_cli.experiment.walk import finished_cell
    from madara_cli.retrievers.spec import retriever_spec
    from madara_cli.strategies import STRATEGIES, StrategyContext

    plan = Plan(grid=grid_name)
    seen_keys: set[str] = set()
    recorders: dict[str, CachedLLM] = {}
    real_caches: dict[str, ResponseCache] = {}
    examples_memo: dict[str, list] = {}
    loaded_memo: dict = {}  # retrieval key -> the cell's load (experiment.examples.CellExamples)
    calibration_memo: dict[str, list] = {}  # the calibration split a routed cell probes on
    estimated: set[str] = set()
    scales: dict[str, float] = {}
    probe_scales: dict[str, float] = {}  # placeholder calibration queries -> the calibration size
    rates: dict[str, dict[str, tuple[float, int]]] = {}  # fingerprint -> kind -> (mean s, n)
    scratch = Path(tempfile.mkdtemp(prefix="madara-plan-"))
    try:
        for cfg in cfgs:
            # Examples and retrieval are real (snapshots are reused and written as usual).
            retr_key = json.dumps([OmegaConf.to_container(cfg.benchmark), OmegaConf.to_container(cfg.retriever), cfg.seed, cfg.limit], sort_keys=True, default=str)
            if retr_key not in examples_memo and retr_key not in loaded_memo:
                try:
                    loaded_memo[retr_key] = load_cell(cfg)
                except DataError as e:
                    exs = placeholder_examples(cfg)
                    # A file the user named is there to be read: estimating around a typo
                    # would report a plan for data that does not exist.
                    if exs is None or cfg.benchmark.get("path"):
                        raise
                    n = evaluated_size(cfg)
                    known = KNOWN_SIZES.get(str(cfg.benchmark.name))
                    size = f"its known size {known}" if known is not None and n == known else "limit, else benchmark.sample"
                    note = (f"{cfg.benchmark.name}: data not here ({re.split(r'[:;]', str(e))[0]}): estimated for {n} queries × k={cfg.retriever.k} "
                            f"documents ({size}) from {len(exs)} placeholder queries")
                    if note not in plan.notes:
                        plan.notes.append(note)
                    examples_memo[retr_key] = exs
                    scales[retr_key] = n / len(exs)
                    # The calibration split is nested in the evaluated one (its first queries).
                    calibration_memo[retr_key] = exs[:min(len(exs), int(cfg.benchmark.calibration))]
                    probe_scales[retr_key] = min(int(cfg.benchmark.calibration), n) / max(len(calibration_memo[retr_key]), 1)
                    estimated.add(retr_key)
            if retr_key in loaded_memo:  # the key the cell will run under (a limit beyond the data is cut)
                cfg, _ = sized_to_data(cfg, loaded_memo[retr_key])
            ident = identify(cfg)
            cell = ident.cell
            plan.cells.append(cell)
            sp = plan.by_strategy.setdefault(cell.strategy, StrategyPlan())
            sp.cells += 1
            try:
                found = finished_cell(cfg, ident=ident)
            except RecordError:
                found = None  # unreadable: estimated like an unfinished cell
            done = found.record if found is not None else None
            if done is not None:
                acct = done.accounting
                sp.finished_cells += 1
                sp.measured_cells += 1
                sp.measured_requests += int(acct.get("requests", 0))
                sp.measured_calls += int(acct.get("calls_issued", 0))

            if retr_key in estimated:
                sp.estimated_cells += 1
            elif retr_key not in examples_memo:
                loaded = loaded_memo[retr_key]
                rspec = retriever_spec(str(cfg.retriever.name))
                if rspec is not None and rspec.uses_engine:
                    plan.notes.append(f"{cell.key}: its retriever asks the engine about each candidate on first retrieval (not counted)")
                examples_memo[retr_key] = retrieve_for(cfg, loaded.examples, None)
                calibration_memo[retr_key] = loaded.calibration
            examples = examples_memo[retr_key]

            fp = _fingerprint(cfg)
            if fp not in recorders:
                recorders[fp] = CachedLLM(_Recorder(fp), ResponseCache(scratch / f"{len(recorders)}.sqlite"))
            llm = recorders[fp]
            rec: _Recorder = llm.backend  # type: ignore[assignment]
            # The walk writes nothing where runs look: a routed cell's placeholder probe
            # goes to a scratch results folder seeded with the real finished probes.
            walk_cfg = OmegaConf.merge(cfg, {"results_dir": str(scratch / "results")})
            real_probes = Path(cfg.results_dir) / "probes"
            if real_probes.is_dir() and not (scratch / "results" / "probes").exists():
                shutil.copytree(real_probes, scratch / "results" / "probes")
            scale = scales.get(retr_key, 1.0)  # placeholder walks cover a few queries for many
            spec = STRATEGIES.spec(strategy_impl(cfg.strategy))
            if probed(cfg) and done is None:
                # The probe runs once, on the calibration split, before the treatment: walked
                # on its own so that it is counted at the calibration split's size.
                probe_start = len(rec.seen)
                with llm.fresh_accounting() as probe_acct:
                    try:
                        treatment = Treatment.prepare(walk_cfg, None, calibration_memo.get(retr_key))
                        if treatment.calibration is not None:
                            find_or_run_probe(walk_cfg, llm, examples=treatment.calibration, spec=treatment.spec)
                    except DataError:
                        if retr_key not in estimated:
                            raise
                probe_scale = probe_scales.get(retr_key, 1.0)
                _count(plan, sp, rec, rec.seen[probe_start:], seen_keys, real_caches, rates, cfg, fp, probe_scale, done is not None)
                sp.probe_requests += round(probe_acct.total().requests * probe_scale)
                sp.requests += round(probe_acct.total().requests * probe_scale)
            start = len(rec.seen)
            with llm.fresh_accounting() as acct:
                try:
                    if spec.run is None:  # madara: the probe is on disk (walked above, or finished): one route
                        strategy_for(spec, walk_cfg, None, calibration_memo.get(retr_key), None)(StrategyContext(llm=llm, cfg=walk_cfg), examples)
                    else:
                        # Each query's requests depend on that query alone, so the walk goes a
                        # block of queries at a time: one block's rendered prompts are held at
                        # once, not the whole benchmark's (docs/benchmarks.md).
                        strategy = spec.run
                        for i in range(0, len(examples), WALK_BLOCK):
                            strategy(StrategyContext(llm=llm, cfg=walk_cfg), examples[i:i + WALK_BLOCK])
                except DataError:
                    if retr_key not in estimated:
                        raise
                    note = f"{cell.strategy} on {cell.benchmark}: not estimated (its routing probe needs the calibration split)"
                    if note not in plan.notes:
                        plan.notes.append(note)
            _count(plan, sp, rec, rec.seen[start:], seen_keys, real_caches, rates, cfg, fp, scale, done is not None)
            sp.requests += round(acct.total().requests * scale)
            sp.queries += round(len(examples) * scale)
            sp.scoring_requests += round(sum(v.requests for k, v in acct.by_stage.items() if k.startswith("score")) * scale)
    finally:
        for c in real_caches.values():
            c.close()
        for llm in recorders.values():
            llm.cache.close()
        shutil.rmtree(scratch, ignore_errors=True)
    if rate is not None:
        for sp in plan.by_strategy.values():  # the given throughput times every uncached call
            sp.seconds, sp.timed_calls = max(sp.calls - sp.cached, 0) / rate, float(max(sp.calls - sp.cached, 0))
        plan.notes.append(f"estimated time: the uncached engine calls at the given --rate {rate:g} calls/s")
        return plan
    for fp, by_kind in rates.items():
        if by_kind and by_kind.get("source") == "bench":
            plan.notes.append(f"estimated time: seconds per call from madara bench --only vllm for {fp.split(':')[0]}… "
                              f"(chat {by_kind['chat'][0]:.3f} s, score {by_kind['score'][0]:.3f} s, batched)")
        elif by_kind:
            shown = ", ".join(f"{kind} {mean:.2f} s/call over {n:,}" for kind, (mean, n) in sorted(by_kind.items()))
            plan.notes.append(f"estimated time: engine seconds per call measured in the cache for {fp.split(':')[0]}…: {shown}")
    return plan


def _count(plan: Plan, sp: StrategyPlan, rec: _Recorder, new: list[tuple[str, int]], seen_keys: set[str],
           real_caches: dict[str, ResponseCache], rates: dict, cfg: DictConfig, fp: str, scale: float, finished: bool) -> None:
    """Add the engine calls a walk recorded (``new``: the keys its own cache missed) to
    ``sp``: once across the grid, the real cache's share apart, tokens and time at the
    measured rates. A finished cell's calls are marked seen (a later cell sharing them
    reads them from the cache) but cost nothing more."""
    cache_path = str(Path(cfg.cache).resolve())
    if cache_path not in real_caches and Path(cache_path).is_file():
        real_caches[cache_path] = ResponseCache(cache_path)
    fresh = [(k, c) for k, c in new if k not in seen_keys]
    seen_keys.update(k for k, _ in fresh)
    if finished:
        return
    in_cache = real_caches[cache_path].get_many([k for k, _ in fresh]) if cache_path in real_caches else {}
    sp.calls += round(len(fresh) * scale)
    sp.cached += len(in_cache)
    if cache_path in real_caches and fp not in rates:
        rates[fp] = real_caches[cache_path].seconds_per_call(fp)
    if not rates.get(fp):
        rates[fp] = bench_rates(Path(str(cfg.results_dir)) / "bench", fp)
    for k, _ in fresh:
        if k in in_cache:
            continue
        sp.output_tokens += round(rec.max_out.get(k, 0) * scale)
        rate = rates.get(fp, {}).get(rec.kinds.get(k, "chat"))
        if rate is not None:
            sp.seconds += rate[0] * scale
            sp.timed_calls += scale
    sp.prompt_tokens += round(sum(c for _, c in fresh) * scale) // 4


def bench_rates(bench_dir: Path, fingerprint: str) -> dict:
    """Seconds per call by kind from ``madara bench --only vllm`` on this engine
    (``<results>/bench/vllm.json``): its stage call spread over its requests (chat) and
    its prefill-only pass (score, one token), prefix caching on. Empty when the bench
    has not run on this fingerprint."""
    from madara_cli.errors import DataError
    from madara_cli.sidefiles import read_json

    try:  # a side file like any other: cut, foreign or odd, it only means no measured rates
        over = read_json(bench_dir / "vllm.json", "the vLLM bench")["overhead"]
        on = over["prefix_caching_on"]
        if over.get("fingerprint") != fingerprint or not over.get("requests"):
            return {}
        n = int(over["requests"])
        return {"chat": (float(min(on["madara_seconds"])) / n, n), "score": (float(min(on["prefill_seconds"])) / n, n), "source": "bench"}
    except (DataError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return {}


# A retrieved passage's length in characters (FlashRAG's 100-word Wikipedia chunks).
PLACEHOLDER_DOC_CHARS = 600
PLACEHOLDER_QUERIES = 20  # walked; counts scale linearly to the configured size


def placeholder_examples(cfg: DictConfig) -> list | None:
    """Stand-in queries when a benchmark's data is not here yet: up to
    :data:`PLACEHOLDER_QUERIES` queries with ``retriever.k`` passages of typical length,
    so a plan counts requests before anything is downloaded (the caller scales them to
    ``limit``, else ``benchmark.sample``). None when the size is unknown."""
    from madara_cli.records import Doc, Example

    n = evaluated_size(cfg)
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
