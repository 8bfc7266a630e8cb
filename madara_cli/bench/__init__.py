"""``madara bench``: what the runner saves and what it costs, as ratios measured side by
side in one run (one process, one loaded model), written to ``results/bench/*.json``.

Sections (``--only`` picks some):

* ``calls`` -- the unique engine calls of Tables 1 and 2's strategy cells for one model x
  benchmark (shared work counted once: :func:`madara_cli.experiment.plan.plan_grid` walks the
  real strategy code on a recording engine) over (a) the sum of each strategy's own requests
  (a runner without a shared cache) and (b) Table 18's calls per query times the queries. No model.
* ``overhead`` -- madara's tokens/s (cache, accounting, truncation, through
  :class:`~madara_cli.backends.cache.CachedLLM`) over raw ``llama_cpp.Llama.create_chat_completion``
  on the same prompts and sampling, passes in A-B-A order.
* ``scoring`` -- digit-logprob (one forward pass) vs JSON-generation scoring: seconds per
  score, parse failures, rank agreement (Spearman) on the same (document, agent) pairs.
* ``stats`` -- the paired bootstrap: exact counts fast path vs vectorised resampling vs a loop.
* ``stages`` -- wall and engine seconds by stage of NF, PDE-Random, 3-Agent and PDE cells
  run into a scratch results folder with a fresh cache.
* ``threads`` -- llama.cpp tokens/s by ``n_threads``, alone and with every core busy
  (what the ``backend.n_threads`` default rests on).
* ``vllm`` -- the vLLM backend's stage call vs ``LLM.generate``, prefix caching on and off,
  and vLLM vs llama.cpp at temperature 0 (:mod:`madara_cli.bench.vllm`).
* ``vllm_cpu`` -- the CPU build's defaults: float32 vs bfloat16, vLLM's thread binding vs both cores to OpenMP.
* ``openai_pool`` -- ``backend=openai``'s keep-alive client vs a connection per request on
  a real local llama-cpp-python server, bare and for logprob scores (:mod:`madara_cli.bench.served`).
* ``plan`` -- ``madara plan``'s estimate ÷ wall time per shipped strategy, after one
  calibration run (:mod:`madara_cli.bench.plan_cost`).

A module of this package may add sections (:func:`register_section`) without this one naming
them. Timings are wall-clock on whatever else the machine runs; the ratios compare runs made
back to back in one process, which is what they are for.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from madara_cli.backends.llamacpp import physical_cores  # what the n_threads default rests on
from madara_cli.bench.engine_agreement import examples  # the first n queries of a cell, through the one walk

SECTIONS = ("calls", "overhead", "scoring", "stats", "stages", "threads", "vllm", "vllm_cpu", "openai_pool")
DEFAULT_SECTIONS = ("calls", "overhead", "scoring", "stats", "stages")  # threads: minutes on a busy machine; vllm: needs vLLM
TABLE_STRATEGIES = ("nf", "pde_random", "pde_uniform", "pde", "three_agent", "cot", "sda", "sda_cot", "atf")
# Table 18 notes give calls per query for nf, 3-Agent/CoT/SDA, ATF, PDE and PDE-Random;
# PDE-Uniform makes PDE's calls and SDA+CoT those of CoT (an assumption, stated in the output).
PAPER_ALIAS = {"pde_uniform": "pde", "sda_cot": "cot"}


@dataclass
class BenchOptions:
    model: str = "smollm2-135m"
    benchmark: str = "mini"
    limit: int = 2  # calls: queries per cell of the plan
    stage_limit: int = 1  # stages: queries per cell
    prompts: int = 4  # overhead: prompts
    score_questions: int = 1  # scoring: questions
    score_docs: int = 4  # scoring: documents per question (x 3 agents, per mode)
    stat_queries: int = 1000
    stat_resamples: int = 10_000
    n_threads: int | None = 1  # llama.cpp threads for the model sections (None = the backend default)
    overrides: list[str] = field(default_factory=list)
    out_dir: Path = Path("results/bench")


def _cfg(opts: BenchOptions, *extra: str):
    from madara_cli.composition import compose
    from madara_cli.config.overrides import parse_overrides

    threads = [] if opts.n_threads is None else [f"backend.n_threads={opts.n_threads}"]
    named = {o.key for o in parse_overrides(opts.overrides) if not o.prefix}  # a plain model=/benchmark= of the user's wins
    base = [f"{g}={v}" for g, v in (("model", opts.model), ("benchmark", opts.benchmark)) if g not in named]
    return compose([*base, *threads, *opts.overrides, *extra])


def bench_calls(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.data.splits import load_benchmark
    from madara_cli.experiment.plan import paper_calls_per_query, plan_grid
    from madara_cli.paper import TABLE18_CALLS

    cfgs = [_cfg(opts, f"strategy={s}", f"limit={opts.limit}", f"results_dir={scratch / 'plan'}", "grid_name=bench") for s in TABLE_STRATEGIES]
    plan = plan_grid("bench", cfgs)

    n = min(opts.limit, len(load_benchmark(cfgs[0].benchmark, seed=int(cfgs[0].seed))))
    rows = {}
    for name, sp in plan.by_strategy.items():
        paper = TABLE18_CALLS.get(PAPER_ALIAS.get(name, name))
        pq = sp.per_query()
        rows[name] = {
            "requests": sp.requests, "new_unique_calls": sp.calls, "paper_calls": None if paper is None else paper * n,
            # The strategy's own calls per query, the agents' scoring apart, beside Table 18's note.
            "scoring_calls_per_query": None if pq is None else round(pq[0], 2),
            "other_calls_per_query": None if pq is None else round(pq[1], 2),
            "paper_calls_per_query": paper_calls_per_query(name),
        }
    t = plan.total()
    paper_sum = sum(r["paper_calls"] or 0 for r in rows.values())
    return {
        "model": opts.model, "benchmark": opts.benchmark, "queries": n, "strategies": list(TABLE_STRATEGIES), "by_strategy": rows,
        "unique_calls": t.calls, "sum_own_requests": t.requests, "sum_paper_calls": paper_sum,
        "ratio_unique_vs_own_requests": _ratio(t.calls, t.requests),
        "ratio_unique_vs_paper": _ratio(t.calls, paper_sum),
        "notes": [
            "paper calls: Table 18 notes per query (NF 1, 3-Agent/CoT/SDA 19, ATF 19+1, PDE 19+d, PDE-Random d, d=10) x queries;"
            " PDE-Uniform counted as PDE and SDA+CoT as CoT (the notes do not list them)",
            "madara is left out: its probe runs once per (model, benchmark) on the calibration split, not per query",
            *plan.notes,
        ],
    }


def _engine(opts: BenchOptions, scratch: Path):
    from madara_cli.backends import make_backend

    cfg = _cfg(opts, f"results_dir={scratch / 'engine'}")
    return cfg, make_backend(cfg)


def bench_overhead(opts: BenchOptions, scratch: Path, engine) -> dict[str, Any]:
    """Per prompt, the raw call and madara's back to back (order alternating), each from an
    empty KV cache, so load drifts hit both alike; the ratio is the median of the per-prompt ratios."""
    from madara_cli.agents.generator import generation_request
    from madara_cli.backends.cache import CachedLLM, ResponseCache

    cfg, backend = engine
    if backend.name != "llamacpp":
        return {"skipped": f"overhead compares with raw llama.cpp; backend is {backend.name}"}
    exs = examples(cfg, opts.prompts)
    reqs = [generation_request(ex, ex.docs, int(cfg.generation.max_tokens), float(cfg.model.temperature), int(cfg.seed)) for ex in exs]
    cache = ResponseCache(scratch / "overhead.sqlite")
    llm = CachedLLM(backend, cache)

    def raw(r) -> tuple[float, float, int]:
        backend.llm.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        out = backend.llm.create_chat_completion(
            messages=[{"role": m.role, "content": m.content} for m in r.messages],
            temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=r.seed, stop=list(r.stop) or None,
        )
        return time.perf_counter() - t0, time.process_time() - c0, out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]

    engine_s: list[float] = []

    def ours(r) -> tuple[float, float, int]:
        backend.llm.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        (c,) = llm.chat("generate", [r])  # fresh cache: the request reaches the engine
        dt = time.perf_counter() - t0
        engine_s.append(c.seconds)  # the create_chat_completion call inside this one
        return dt, time.process_time() - c0, c.tokens_in + c.tokens_out

    raw(reqs[0])  # warm-up (page cache, first KV allocation)
    pairs = []
    try:
        for i, r in enumerate(reqs):
            a, b = (raw(r), ours(r)) if i % 2 == 0 else tuple(reversed((ours(r), raw(r))))
            pairs.append((a, b))
    finally:
        cache.close()

    def tps(which: int, clock: int) -> float:
        return sum(p[which][2] for p in pairs) / max(sum(p[which][clock] for p in pairs), 1e-9)

    wall = [(b[2] / b[0]) / (a[2] / a[0]) for a, b in pairs]
    cpu = [(b[2] / max(b[1], 1e-9)) / (a[2] / max(a[1], 1e-9)) for a, b in pairs]
    return {
        "prompts": len(reqs),
        "raw_tokens_per_s": round(tps(0, 0), 2), "madara_tokens_per_s": round(tps(1, 0), 2),
        "raw_tokens_per_cpu_s": round(tps(0, 1), 2), "madara_tokens_per_cpu_s": round(tps(1, 1), 2),
        # Headline: the engine call inside madara's is the raw engine on the same prompt at the
        # same moment, so engine seconds / madara seconds is the ratio with the load cancelled out.
        "ratio_madara_vs_raw": _ratio(sum(engine_s), sum(b[0] for _, b in pairs)),
        "orchestration_seconds_per_call": round((sum(b[0] for _, b in pairs) - sum(engine_s)) / len(pairs), 4),
        "ratio_paired_cpu_median": round(float(np.median(cpu)), 3), "ratio_paired_wall_median": round(float(np.median(wall)), 3),
        "per_prompt_ratios_cpu": [round(x, 3) for x in cpu], "per_prompt_ratios_wall": [round(x, 3) for x in wall],
        "notes": ["tokens = prompt + completion tokens; raw = llama_cpp.Llama.create_chat_completion on the same messages and sampling;"
                  " ratio_madara_vs_raw = (engine seconds inside madara's calls) / (madara's wall seconds): the same engine call on the same"
                  " prompt at the same moment, so other processes' load cancels out; the paired ratios run a separate raw call per prompt"
                  " back to back (each from an empty KV cache, order alternating) and carry the load's noise"],
    }


def bench_scoring(opts: BenchOptions, scratch: Path, engine) -> dict[str, Any]:
    from madara_cli.agents.parsing import parse_completion
    from madara_cli.agents.prompts import AGENTS
    from madara_cli.agents.requests import score_requests
    from madara_cli.core.stats import spearman

    cfg, backend = engine
    exs = examples(cfg, opts.score_questions)
    kw = dict(cot=False, max_tokens=int(cfg.generation.score_max_tokens), temperature=float(cfg.model.temperature), seed=int(cfg.seed))
    out: dict[str, Any] = {"questions": len(exs)}
    values: dict[str, list[float]] = {}
    for mode, call in (("logprob", backend.next_token_logprobs), ("generate", backend.chat)):
        reqs = [r for ex in exs for r in score_requests(ex, mode=mode, **kw)[: 3 * opts.score_docs]]
        t0 = time.perf_counter()
        comps = call(reqs)
        dt = time.perf_counter() - t0
        parsed = [parse_completion(c, AGENTS[i % len(AGENTS)], mode) for i, c in enumerate(comps)]
        values[mode] = [p.value for p in parsed]
        out[mode] = {"scores": len(reqs), "seconds_per_score": round(dt / len(reqs), 4), "parse_failures": sum(not p.ok for p in parsed),
                     "tokens_out": sum(c.tokens_out for c in comps)}
    a, b = np.array(values["logprob"]), np.array(values["generate"])
    ok = ~(np.isnan(a) | np.isnan(b))
    rho, p = spearman(a[ok], b[ok]) if ok.sum() >= 3 else (float("nan"), float("nan"))
    out["ratio_generate_vs_logprob_seconds"] = _ratio(out["generate"]["seconds_per_score"], out["logprob"]["seconds_per_score"])
    out["rank_agreement_spearman"] = None if np.isnan(rho) else round(float(rho), 3)
    out["rank_agreement_p"] = None if np.isnan(p) else float(f"{p:.3g}")
    out["pairs_compared"] = int(ok.sum())
    if ok.sum() < 3:
        out["note"] = "rank agreement needs >= 3 pairs both modes could read; generated JSON failed to parse (a larger model: model=...)"
    return out


def _loop_bootstrap(diff: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = diff.size
    return np.array([diff[rng.integers(0, n, n)].mean() for _ in range(n_resamples)])


def bench_stats(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.core import stats

    rng = np.random.default_rng(0)
    n, b = opts.stat_queries, opts.stat_resamples
    a_em, b_em = (rng.random(n) < 0.55).astype(int), (rng.random(n) < 0.45).astype(int)
    d = (a_em - b_em).astype(float)
    t: dict[str, float] = {}
    res: dict[str, Any] = {}
    for name, fn in (
        ("counts", lambda: stats.paired_bootstrap(a_em, b_em, b, seed=0, method="counts")),
        ("vectorised", lambda: stats.paired_bootstrap(a_em, b_em, b, seed=0, method="resample")),
        ("loop", lambda: _loop_bootstrap(d, b, 0)),
    ):
        t0 = time.perf_counter()
        r = fn()
        t[name] = time.perf_counter() - t0
        if name != "loop":
            res[name] = {"ci": [round(r.ci_low, 4), round(r.ci_high, 4)], "p": r.p_value}
    return {
        "queries": n, "resamples": b, "seconds": {k: round(v, 5) for k, v in t.items()},
        "ratio_loop_vs_vectorised": _ratio(t["loop"], t["vectorised"]), "ratio_vectorised_vs_counts": _ratio(t["vectorised"], t["counts"]),
        "ratio_loop_vs_counts": _ratio(t["loop"], t["counts"]), "results": res,
    }


def bench_stages(opts: BenchOptions, scratch: Path, engine) -> dict[str, Any]:
    from madara_cli.config import strategy_settings
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.runner import run_cell

    _, backend = engine
    results = scratch / "stages"
    cfgs = [_cfg(opts, f"strategy={s}", f"limit={opts.stage_limit}", f"results_dir={results}", "grid_name=bench",
                 *(["strategy.scoring=logprob"] if "scoring" in strategy_settings(s) else []))
            for s in ("nf", "pde_random", "three_agent", "pde")]
    t0 = time.perf_counter()
    with EnginePool(factory=lambda cfg: _NoClose(backend)) as pool:  # the loaded engine is lent: no load time is counted
        cells = [run_cell(cfg, pool) for cfg in cfgs]
    total = time.perf_counter() - t0
    by_stage: dict[str, float] = {}
    out_cells = {}
    for c in cells:
        rec = c.record
        tm = rec.timing or {}
        for st, s in tm.get("engine_seconds_by_stage", {}).items():
            by_stage[st] = by_stage.get(st, 0.0) + s
        out_cells[c.cell.strategy] = {"wall_seconds": tm.get("wall_seconds"), "engine_seconds": tm.get("engine_seconds"),
                                      "calls_issued": rec.accounting["calls_issued"], "cache_hits": rec.accounting["cache_hits"]}
    engine_total = sum(by_stage.values())
    return {
        "queries": opts.stage_limit, "cells": out_cells, "engine_seconds_by_stage": {k: round(v, 3) for k, v in by_stage.items()},
        "wall_seconds": round(total, 3), "engine_share_of_wall": _ratio(engine_total, total),
        "calls_issued": sum(v["calls_issued"] for v in out_cells.values()), "cache_hits": sum(v["cache_hits"] for v in out_cells.values()),
    }


class _NoClose:
    """The bench's engine, lent to a pool that would close it."""

    def __init__(self, inner):
        self._inner = inner
        self.name = inner.name

    def __getattr__(self, item):
        return getattr(self._inner, item)

    def close(self) -> None:
        pass


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def bench_threads(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.agents.generator import generation_request
    from madara_cli.backends import make_backend

    cores = physical_cores()
    counts = sorted({1, max(1, cores // 2), cores, (os.cpu_count() or cores)})
    out: dict[str, Any] = {"physical_cores": cores, "logical_cpus": os.cpu_count(), "runs": []}
    for n_threads in counts:
        o = BenchOptions(**{**opts.__dict__, "n_threads": n_threads})
        cfg = _cfg(o, f"results_dir={scratch / 'threads'}")
        backend = make_backend(cfg)
        reqs = [generation_request(ex, ex.docs, 16, float(cfg.model.temperature), int(cfg.seed)) for ex in examples(cfg, 2)]

        def rate(backend=backend, reqs=reqs) -> float:
            t0, toks = time.perf_counter(), 0
            for r in reqs:
                backend.llm.reset()
                c = backend.chat([r])[0]
                toks += c.tokens_in + c.tokens_out
            return toks / (time.perf_counter() - t0)

        rate()
        alone = rate()
        ctx = mp.get_context("spawn")
        burners = [ctx.Process(target=_burn, args=(time.time() + 600,), daemon=True) for _ in range(cores)]
        for p in burners:
            p.start()
        try:
            time.sleep(0.5)
            shared = rate()
        finally:
            for p in burners:
                p.terminate()
                p.join()
        backend.close()
        out["runs"].append({"n_threads": n_threads, "tokens_per_s_alone": round(alone, 1), "tokens_per_s_with_busy_cores": round(shared, 1)})
    best_alone = max(out["runs"], key=lambda r: r["tokens_per_s_alone"])
    best_shared = max(out["runs"], key=lambda r: r["tokens_per_s_with_busy_cores"])
    out["best_alone"], out["best_shared"] = best_alone["n_threads"], best_shared["n_threads"]
    return out


def _served_cfg(opts: BenchOptions, scratch: Path, backend: str):
    """``backend`` at its own thread default, three documents a question."""
    from dataclasses import replace

    return _cfg(replace(opts, n_threads=None), f"backend={backend}", "retriever.k=3", f"results_dir={scratch / backend}")


def _bench_vllm(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.bench.vllm import bench_vllm  # vLLM's section: its own room

    return bench_vllm(_served_cfg(opts, scratch, "vllm"), opts.stage_limit, opts.score_questions)


def _bench_vllm_cpu(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.bench.vllm import bench_vllm_cpu

    return bench_vllm_cpu(_served_cfg(opts, scratch, "vllm"), opts.stage_limit)


def _bench_openai_pool(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.bench.served import bench_openai_pool

    return bench_openai_pool(_served_cfg(opts, scratch, "openai"), scratch, opts.score_docs, opts.n_threads)


def _ratio(a: float, b: float) -> float | None:
    return None if not b else round(float(a) / float(b), 3)


@dataclass(frozen=True)
class BenchSection:
    """A section a module adds: ``run(opts, scratch)`` returns ``<name>.json``'s content, ``rows(result)`` its table lines."""

    name: str
    run: Callable[[BenchOptions, Path], dict[str, Any]]
    rows: Callable[[dict[str, Any]], list[tuple[str, str, str]]]


_ADDED: dict[str, BenchSection] = {}


def register_section(section: BenchSection) -> BenchSection:
    if section.name in SECTIONS or _ADDED.get(section.name, section) is not section:
        raise ValueError(f"bench section '{section.name}' is already taken")
    _ADDED[section.name] = section
    return section


def added_sections() -> dict[str, BenchSection]:
    """The sections the modules of this package add (each imported here to register its own)."""
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "verb":
            importlib.import_module(f"{__name__}.{mod.name}")
    return dict(_ADDED)


def all_sections() -> tuple[str, ...]:
    return SECTIONS + tuple(added_sections())


def run_bench(opts: BenchOptions, only: tuple[str, ...] = DEFAULT_SECTIONS, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the sections, write ``<out_dir>/<section>.json`` and ``summary.json``."""
    added = added_sections()
    bad = [s for s in only if s not in SECTIONS and s not in added]
    if bad:
        from madara_cli.core.errors import ConfigError

        raise ConfigError(f"unknown bench section(s) {', '.join(bad)}; valid: {', '.join(all_sections())}")
    from madara_cli.experiment.runner import ensure_writable

    ensure_writable(opts.out_dir)
    scratch = Path(tempfile.mkdtemp(prefix="madara-bench-"))
    results: dict[str, Any] = {}
    engine = None
    try:
        for name in only:
            say(f"bench: {name} ...")
            t0 = time.perf_counter()
            if name in ("overhead", "scoring", "stages") and engine is None:
                engine = _engine(opts, scratch)
            fn = {"calls": bench_calls, "stats": bench_stats, "threads": bench_threads, "vllm": _bench_vllm, "vllm_cpu": _bench_vllm_cpu,
                  "openai_pool": _bench_openai_pool, **{k: sec.run for k, sec in added.items()}}.get(name)
            r = fn(opts, scratch) if fn else {"overhead": bench_overhead, "scoring": bench_scoring, "stages": bench_stages}[name](opts, scratch, engine)
            r["section_seconds"] = round(time.perf_counter() - t0, 2)
            r["machine"] = machine()
            results[name] = r
            (opts.out_dir / f"{name}.json").write_text(json.dumps(r, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    finally:
        if engine is not None:
            engine[1].close()
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {name: {k: v for k, v in r.items() if k.startswith("ratio") or k in ("rank_agreement_spearman", "best_alone", "best_shared")}
               for name, r in results.items()}
    (opts.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return results


def machine() -> dict[str, Any]:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        load = None
    return {"cpus": os.cpu_count(), "physical_cores": physical_cores(), "loadavg": load, "python": platform.python_version()}


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(section, measure, value) rows for the CLI table."""
    rows: list[tuple[str, str, str]] = []
    if c := results.get("calls"):
        rows.append(("calls", f"unique engine calls, Tables 1+2 strategies ({c['queries']} queries)", f"{c['unique_calls']:,}"))
        rows.append(("calls", "÷ sum of own per-strategy requests", _x(c["ratio_unique_vs_own_requests"])))
        rows.append(("calls", "÷ sum of paper's per-strategy calls (Table 18)", _x(c["ratio_unique_vs_paper"])))
        for name, r in c["by_strategy"].items():
            if r.get("scoring_calls_per_query") is not None and r["paper_calls_per_query"] != "—":
                rows.append(("calls", f"{name} calls/query: {r['scoring_calls_per_query']:g} scoring + {r['other_calls_per_query']:g} other "
                             f"(Table 18: {r['paper_calls_per_query']})", f"{r['scoring_calls_per_query'] + r['other_calls_per_query']:g}"))
    if (o := results.get("overhead")) and "skipped" not in o:
        rows.append(("overhead", f"madara tokens/s ÷ engine tokens/s, same calls ({o['orchestration_seconds_per_call'] * 1000:.1f} ms/call outside the engine)",
                     _x(o["ratio_madara_vs_raw"])))
        rows.append(("overhead", f"paired separate raw calls: {o['madara_tokens_per_s']:.0f} vs {o['raw_tokens_per_s']:.0f} tokens/s (median, noisy under load)",
                     _x(o["ratio_paired_wall_median"])))
    if s := results.get("scoring"):
        rows.append(("scoring", f"s/score: generate {s['generate']['seconds_per_score']:.3f} vs logprob {s['logprob']['seconds_per_score']:.3f}",
                     _x(s["ratio_generate_vs_logprob_seconds"])))
        rows.append(("scoring", f"rank agreement (Spearman, {s['pairs_compared']} pairs)", str(s["rank_agreement_spearman"])))
    if st := results.get("stats"):
        sec = st["seconds"]
        rows.append(("stats", f"bootstrap {st['queries']}x{st['resamples']}: loop {sec['loop']:.3f}s, vectorised {sec['vectorised']:.3f}s, counts {sec['counts']:.4f}s", ""))
        rows.append(("stats", "loop ÷ vectorised", _x(st["ratio_loop_vs_vectorised"])))
        rows.append(("stats", "vectorised ÷ counts fast path", _x(st["ratio_vectorised_vs_counts"])))
    if g := results.get("stages"):
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in g["engine_seconds_by_stage"].items())
        rows.append(("stages", f"{len(g['cells'])} cells x {g['queries']} queries: wall {g['wall_seconds']:.1f}s; engine {stages}", _x(g["engine_share_of_wall"]) + " engine"))
    if v := results.get("vllm"):
        for mode in ("on", "off"):
            o = v["overhead"][f"prefix_caching_{mode}"]
            rows.append(("vllm", f"madara stage call ÷ LLM.generate, same {v['overhead']['requests']} requests, prefix caching {mode}",
                         _x(o["ratio_madara_vs_raw"])))
        if a := v.get("agreement"):
            rows.append(("vllm", f"vs llama.cpp at temperature 0: top digit equal on {a['score_requests']} scores, mean |ΔE| "
                         f"{a['expected_score_mean_abs_diff']}, answers equal {a['answers_equal']:.0%}", f"{a['top_digit_agreement']:.0%}"))
    if vc := results.get("vllm_cpu"):
        rows.append(("vllm_cpu", f"bfloat16 ÷ float32 seconds, same {vc['requests']} requests (the CPU build's default: float32)",
                     _x(vc["ratio_bfloat16_vs_float32_seconds"])))
        rows.append(("vllm_cpu", "both cores to OpenMP ÷ vLLM's binding (one core kept), seconds", _x(vc["ratio_all_cores_vs_default_binding_seconds"])))
    if (op := results.get("openai_pool")) and "skipped" not in op:
        server = op["server"] or {}
        for w, what in (("transport", "GET /v1/models"), ("score", "logprob scores")):
            r = op[w]
            rows.append(("openai_pool", f"{what} ({r['requests_per_pass']}/pass, {server.get('software')} {server.get('version')}): keep-alive "
                         f"{r['requests_per_s_pooled']:.3g} vs new connection {r['requests_per_s_per_request_connection']:.3g} requests/s",
                         _x(op[f"ratio_pooled_vs_per_request_{w}"])))
    elif op:
        rows.append(("openai_pool", op["skipped"], "—"))
    if t := results.get("threads"):
        for r in t["runs"]:
            rows.append(("threads", f"n_threads={r['n_threads']}: alone {r['tokens_per_s_alone']} tok/s, cores busy {r['tokens_per_s_with_busy_cores']} tok/s", ""))
    for name, section in added_sections().items():
        if results.get(name):
            rows += section.rows(results[name])
    return rows


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}×"
