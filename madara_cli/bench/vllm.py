"""``madara bench --only vllm``: madara's vLLM backend against vLLM itself, and vLLM
against llama.cpp, on the same requests in one run.

* **overhead** -- one real stage's requests (the three agents' JSON scores over the first
  documents of ``--stage-limit`` questions): madara's stage call (``VLLMBackend.chat``:
  rendering, truncation, safe token ids, one batched call) against ``LLM.generate`` on the
  same token ids and ``SamplingParams``, passes alternating, the prefix cache emptied before
  each, prefix caching on then off (two engines). The ratio is raw seconds over madara's
  (goal >= 0.9). A ``max_tokens=1`` pass times the prefill alone, splitting the time into
  seconds per prompt and per output token: what ``madara plan``'s ``est. time`` multiplies by.
* **agreement** -- the same requests at temperature 0 through llama.cpp (the GGUF) and vLLM
  (the folder made from it, float32 on the CPU build): :mod:`.engine_agreement`.
"""

from __future__ import annotations

from typing import Any

from madara_cli.bench.engine_agreement import agreement_with_llamacpp, stage_requests, timed

PASSES = 2  # timed, after one untimed pass of each (the first shapes still warm kernels up on the CPU build)
WARMUP = 1


def bench_vllm_overhead(cfg, n_questions: int) -> dict[str, Any]:

    from madara_cli.backends import backend_fingerprint, make_backend

    _, reqs = stage_requests(cfg, n_questions, "generate")
    out: dict[str, Any] = {"requests": len(reqs)}
    for caching in (True, False):
        backend = make_backend(cfg.merged({"backend": {"enable_prefix_caching": caching}}))
        try:
            out["prefix_caching_on" if caching else "prefix_caching_off"] = _one_engine(backend, reqs)
        finally:
            backend.close()
    on, off = out["prefix_caching_on"], out["prefix_caching_off"]
    out["ratio_madara_vs_raw"] = on["ratio_madara_vs_raw"]
    out["ratio_madara_vs_raw_no_prefix_cache"] = off["ratio_madara_vs_raw"]
    out["fingerprint"] = backend_fingerprint(cfg)
    out["notes"] = [
        "raw = vLLM's LLM.generate on the token ids madara's stage call sends, with the same SamplingParams; ratio = raw seconds /"
        " madara seconds (fastest of the passes, alternating order, prefix cache emptied before each pass)",
        "seconds per prompt/output token: prefill alone (max_tokens=1) timed apart, the rest of the raw pass spread over its output tokens;"
        " madara plan uses them for est. time on this engine fingerprint",
    ]
    return out


def _one_engine(backend, reqs) -> dict[str, Any]:
    from dataclasses import replace

    llm = backend.llm
    prompts = [{"prompt_token_ids": backend.render.ids(r.messages, r.prefix)} for r in reqs]
    params = [backend._sampling(r) for r in reqs]
    prefill_params = [backend._sampling(replace(r, max_tokens=1)) for r in reqs]

    def raw() -> None:
        llm.generate(prompts, sampling_params=params, use_tqdm=False)

    def ours() -> None:
        backend.chat(reqs)

    for _ in range(WARMUP):
        ours()
        raw()
    times: dict[str, list[float]] = {"ours": [], "raw": [], "prefill": []}
    for i in range(PASSES):
        for name, fn in ((("ours", ours), ("raw", raw)) if i % 2 == 0 else (("raw", raw), ("ours", ours))):
            llm.reset_prefix_cache()
            times[name].append(timed(fn))
        llm.reset_prefix_cache()
        times["prefill"].append(timed(lambda: llm.generate(prompts, sampling_params=prefill_params, use_tqdm=False)))
    outs = llm.generate(prompts, sampling_params=params, use_tqdm=False)
    tokens_in = sum(len(p["prompt_token_ids"]) for p in prompts)
    tokens_out = sum(len(o.outputs[0].token_ids) for o in outs)
    # the fastest pass of each: the least disturbed by whatever else the machine runs
    t_raw, t_ours, t_pre = (min(times[k]) for k in ("raw", "ours", "prefill"))
    decode = max(t_raw - t_pre, 0.0)
    return {
        "madara_seconds": [round(x, 3) for x in times["ours"]], "raw_seconds": [round(x, 3) for x in times["raw"]],
        "prefill_seconds": [round(x, 3) for x in times["prefill"]], "tokens_in": tokens_in, "tokens_out": tokens_out,
        "ratio_madara_vs_raw": round(t_raw / t_ours, 3) if t_ours else None,
        "seconds_per_prompt_token": t_pre / tokens_in if tokens_in else None,
        "seconds_per_output_token": decode / tokens_out if tokens_out else None,
    }


def bench_vllm_cpu(cfg, n_questions: int) -> dict[str, Any]:
    """The CPU build's defaults, measured: float32 vs bfloat16, and vLLM's thread binding
    (one core kept for its scheduler, the default) vs both cores to OpenMP
    (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``), on one stage's requests, engines one after another."""
    import os

    from madara_cli.backends import make_backend

    _, reqs = stage_requests(cfg, n_questions, "generate")
    runs = {"float32": ({"dtype": "float32"}, None), "bfloat16": ({"dtype": "bfloat16"}, None),
            "float32_all_cores": ({"dtype": "float32"}, "0")}
    out: dict[str, Any] = {"requests": len(reqs)}
    for name, (backend_settings, reserved) in runs.items():
        old = os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
        if reserved is not None:
            os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = reserved
        try:
            backend = make_backend(cfg.merged({"backend": backend_settings}))
            try:
                backend.chat(reqs)  # warm-up
                times = []
                for _ in range(2):
                    backend.llm.reset_prefix_cache()
                    times.append(timed(lambda: backend.chat(reqs)))  # noqa: B023 - called at once
                out[name] = {"seconds": [round(t, 3) for t in times]}
            finally:
                backend.close()
        finally:
            if reserved is not None:
                if old is None:
                    os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
                else:
                    os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = old
    best = {k: min(v["seconds"]) for k, v in out.items() if isinstance(v, dict)}
    out["ratio_bfloat16_vs_float32_seconds"] = round(best["bfloat16"] / best["float32"], 3)
    out["ratio_all_cores_vs_default_binding_seconds"] = round(best["float32_all_cores"] / best["float32"], 3)
    return out


def bench_vllm(cfg, stage_questions: int, agreement_questions: int) -> dict[str, Any]:
    """Both measurements on ``cfg`` (a ``backend=vllm`` config)."""
    from madara_cli.backends.vllm_backend import on_cpu_build, vllm_version

    out: dict[str, Any] = {"vllm": vllm_version(), "cpu_build": on_cpu_build(), "model": str(cfg.model.name),
                           "overhead": bench_vllm_overhead(cfg, stage_questions)}
    out["ratio_madara_vs_raw"] = out["overhead"]["ratio_madara_vs_raw"]
    out["ratio_madara_vs_raw_no_prefix_cache"] = out["overhead"]["ratio_madara_vs_raw_no_prefix_cache"]
    if cfg.model.get("gguf"):  # temperature 0 on both engines, same requests
        out["agreement"] = agreement_with_llamacpp(cfg, agreement_questions, [
            "llama.cpp computes on the GGUF's Q4_1 blocks, vLLM on the float32 folder dequantised from them: the same weights,"
            " other arithmetic, so greedy replies part where two tokens are close"])
    return out
