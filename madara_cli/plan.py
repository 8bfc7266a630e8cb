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
* the prompt tokens (characters / 4, the usual rule of thumb for English BPE).

Requests that depend on model outputs (the documents a filter keeps, the answers
MAIN-RAG's judge sees, the RSC chains) are counted with the placeholder outputs:
their number is right, their content is not, so whether two strategies happen to
send an identical final prompt is only estimated. Routed cells (``madara``) use a
finished probe when one exists, else the route the placeholder probe gives.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.grid import Cell
from madara_cli.records import ChatRequest, Completion, ScoreRequest, request_key


class _Recorder:
    """Stands in for an engine while a plan walks the strategies (see module doc)."""

    name = "plan"

    def __init__(self, fingerprint: str):
        self._fingerprint = fingerprint
        self.seen: list[tuple[str, int]] = []  # (key, prompt chars)

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
    measured_cells: int = 0
    measured_requests: int = 0
    measured_calls: int = 0


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


def _fingerprint(cfg: DictConfig) -> str:
    """The fingerprint the real engine would use, without loading it when possible."""
    if cfg.backend.name == "llamacpp" and cfg.model.gguf:
        from madara_cli.backends.llamacpp import file_fingerprint, resolve_gguf

        return file_fingerprint(resolve_gguf(cfg.model.gguf))
    if cfg.backend.name == "vllm":
        return f"hf:{cfg.model.hf_id}@{cfg.model.revision}"
    return f"{cfg.backend.name}:{cfg.model.hf_id}"  # openai: known only to the server; cache matches are a lower bound


def plan_grid(grid_name: str, cfgs: list[DictConfig]) -> Plan:
    """Estimate every cell of a grid; add measured numbers for finished cells."""
    from madara_cli.data.loaders import load_benchmark
    from madara_cli.data.retrieval import retrieve
    from madara_cli.strategies import STRATEGIES, StrategyContext, load_all

    load_all()
    plan = Plan(grid=grid_name)
    seen_keys: set[str] = set()
    recorders: dict[str, CachedLLM] = {}
    real_caches: dict[str, ResponseCache] = {}
    examples_memo: dict[str, list] = {}
    scratch = Path(tempfile.mkdtemp(prefix="madara-plan-"))
    try:
        for cfg in cfgs:
            cell = Cell.from_cfg(cfg)
            plan.cells.append(cell)
            sp = plan.by_strategy.setdefault(cell.strategy, StrategyPlan())
            sp.cells += 1
            done = cell.folder(cfg.results_dir) / "metrics.json"
            if done.is_file():
                acct = json.loads(done.read_text()).get("accounting", {})
                sp.measured_cells += 1
                sp.measured_requests += int(acct.get("requests", 0))
                sp.measured_calls += int(acct.get("calls_issued", 0))

            # Examples and retrieval are real (snapshots are reused and written as usual).
            retr_key = json.dumps([OmegaConf.to_container(cfg.benchmark), OmegaConf.to_container(cfg.retriever), cfg.seed, cfg.limit], sort_keys=True, default=str)
            if retr_key not in examples_memo:
                exs = load_benchmark(cfg.benchmark, seed=int(cfg.seed))
                exs = exs[: int(cfg.limit)] if cfg.limit is not None else exs
                if cfg.retriever.name == "rerank":
                    first = OmegaConf.merge(cfg, {"retriever": {"name": cfg.retriever.first_stage}})
                    plan.notes.append(f"{cell.key}: reranking adds {cfg.retriever.candidates} judge calls per query on first retrieval (not counted)")
                    exs = retrieve(exs, first)
                else:
                    exs = retrieve(exs, cfg)
                examples_memo[retr_key] = exs
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
            start = len(rec.seen)
            with llm.fresh_accounting() as acct:
                STRATEGIES.get(cfg.strategy.name)(StrategyContext(llm=llm, cfg=walk_cfg), examples)
            new = rec.seen[start:]  # the recorder sees only what its own cache missed
            cache_path = str(Path(cfg.cache).resolve())
            if cache_path not in real_caches and Path(cache_path).is_file():
                real_caches[cache_path] = ResponseCache(cache_path)
            fresh = [(k, c) for k, c in new if k not in seen_keys]
            seen_keys.update(k for k, _ in fresh)
            in_cache = real_caches[cache_path].get_many([k for k, _ in fresh]) if cache_path in real_caches else {}
            sp.calls += len(fresh)
            sp.cached += len(in_cache)
            sp.prompt_tokens += sum(c for _, c in fresh) // 4
            sp.requests += acct.total().requests
    finally:
        for c in real_caches.values():
            c.close()
        for llm in recorders.values():
            llm.cache.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return plan


def within(estimate: int, measured: int, tolerance: float = 0.10) -> bool:
    return measured > 0 and abs(estimate - measured) <= tolerance * measured
