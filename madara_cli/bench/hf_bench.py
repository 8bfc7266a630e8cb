"""``madara bench --only hf``: madara's transformers backend against transformers itself,
and against llama.cpp, on the same requests in one run.

* **overhead** -- one real stage's requests (the three agents' JSON scores over the first
  documents of ``--stage-limit`` questions, at temperature 0 so both sides make the same
  tokens): madara's stage call (``HFBackend.chat``: rendering, truncation, safe token ids,
  length-sorted micro-batches, the per-row sampler and stopper) against a raw batched
  ``model.generate`` as a researcher writes it (same ids and micro-batches, left-padded,
  greedy, transformers' ``stop_strings``), passes alternating, the fastest of each kept.
  The ratio is raw seconds over madara's (goal >= 0.9); the replies are compared too.
* **agreement** -- the engine against llama.cpp (the GGUF itself) at temperature 0
  (:func:`madara_cli.bench.engine_agreement.agreement_with_llamacpp`).
"""

from __future__ import annotations

from typing import Any

from madara_cli.bench import BenchOptions, BenchSection, _cfg, _x, register_section
from madara_cli.bench.engine_agreement import timed

PASSES = 2  # timed, after one untimed pass of each (a CPU pass of 9 requests takes minutes)
WARMUP = 1


def bench_hf_overhead(cfg, n_questions: int) -> dict[str, Any]:
    from madara_cli.backends import backend_fingerprint, make_backend
    from madara_cli.bench.engine_agreement import stage_requests

    _, reqs = stage_requests(cfg, n_questions, "generate", temperature=0.0)
    backend = make_backend(cfg)
    try:
        return _one_engine(backend, reqs) | {"fingerprint": backend_fingerprint(cfg), "micro_batch": backend.micro_batch}
    finally:
        backend.close()


def _one_engine(backend, reqs) -> dict[str, Any]:
    import torch

    model, tok = backend.model, backend.tokenizer
    ids = [backend.render.ids(r.messages, r.prefix) for r in reqs]
    order = sorted(range(len(reqs)), key=lambda i: -len(ids[i]))  # madara's batches, so both pad alike
    batches = [order[s : s + backend.micro_batch] for s in range(0, len(order), backend.micro_batch)]
    stops = {tuple(r.stop) for r in reqs}
    if len(stops) != 1:
        raise ValueError(f"one stage, one set of stop strings; got {stops}")
    (stop,) = stops
    raw_texts: dict[int, str] = {}

    def raw() -> None:
        tok.padding_side = "left"
        for rows in batches:
            enc = tok.pad({"input_ids": [ids[i] for i in rows]}, padding=True, return_tensors="pt").to(backend.device)
            with torch.inference_mode():
                out = model.generate(**enc, max_new_tokens=max(reqs[i].max_tokens for i in rows), do_sample=False,
                                     stop_strings=list(stop) or None, tokenizer=tok)
            for i, row in zip(rows, out[:, enc["input_ids"].shape[1] :].tolist()):
                text = tok.decode([t for t in row if t != backend.pad_id and t not in backend.eos_ids], skip_special_tokens=True)
                cut = min((at for at in (text.find(s) for s in stop) if at >= 0), default=-1)
                raw_texts[i] = text[:cut] if cut >= 0 else text

    ours_out: list = []

    def ours() -> None:
        ours_out[:] = backend.chat(reqs)

    for _ in range(WARMUP):
        ours()
        raw()
    times: dict[str, list[float]] = {"ours": [], "raw": []}
    for i in range(PASSES):
        for name, fn in ((("ours", ours), ("raw", raw)) if i % 2 == 0 else (("raw", raw), ("ours", ours))):
            times[name].append(timed(fn))
    t_raw, t_ours = min(times["raw"]), min(times["ours"])
    return {
        "requests": len(reqs), "tokens_in": sum(len(x) for x in ids), "tokens_out": sum(c.tokens_out for c in ours_out),
        "madara_seconds": [round(x, 3) for x in times["ours"]], "raw_seconds": [round(x, 3) for x in times["raw"]],
        "ratio_madara_vs_raw": round(t_raw / t_ours, 3) if t_ours else None,
        "same_replies": sum(c.text == raw_texts.get(i) for i, c in enumerate(ours_out)),
        "notes": ["raw = model.generate on the token ids madara's stage call sends, in the same length-sorted micro-batches, left-padded"
                  " by the tokenizer, greedy, with transformers' stop_strings; ratio = raw seconds / madara seconds (fastest pass of each,"
                  " order alternating); same_replies: replies identical after the stop string is cut"],
    }


def bench_hf(opts: BenchOptions, scratch) -> dict[str, Any]:
    from dataclasses import replace

    from madara_cli.backends.base import installed_version
    from madara_cli.bench.engine_agreement import agreement_with_llamacpp

    # three documents a question unless the overrides say otherwise (retriever.k=1: a third of the work)
    cfg = _cfg(replace(opts, n_threads=None, overrides=["retriever.k=3", *opts.overrides]), "backend=hf", f"results_dir={scratch / 'hf'}")
    out: dict[str, Any] = {"transformers": installed_version("transformers"), "torch": installed_version("torch"), "model": str(cfg.model.name),
                           "overhead": bench_hf_overhead(cfg, opts.stage_limit)}
    out["ratio_madara_vs_raw"] = out["overhead"]["ratio_madara_vs_raw"]
    if cfg.model.get("gguf"):
        out["agreement"] = agreement_with_llamacpp(cfg, opts.score_questions, [
            "llama.cpp computes on the GGUF's Q4_1 blocks, transformers on the folder dequantised from them (float32 on the CPU):"
            " the same weights, other arithmetic, so greedy replies part where two tokens are close"])
    return out


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    o = result["overhead"]
    out = [("hf", f"madara stage call ÷ raw model.generate, same {o['requests']} requests, micro-batches of {o['micro_batch']}"
                  f" ({o['same_replies']}/{o['requests']} replies identical)", _x(o["ratio_madara_vs_raw"]))]
    if a := result.get("agreement"):
        out.append(("hf", f"vs llama.cpp at temperature 0: top digit equal on {a['score_requests']} scores, mean |ΔE| "
                          f"{a['expected_score_mean_abs_diff']}, answers equal {a['answers_equal']:.0%}", f"{a['top_digit_agreement']:.0%}"))
    return out


SECTION = register_section(BenchSection(name="hf", run=bench_hf, rows=rows))
