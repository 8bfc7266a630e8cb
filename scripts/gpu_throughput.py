"""madara's NF cell through vLLM beside vLLM's own offline throughput on the same
prompts, in one process with one loaded engine (needs a CUDA GPU and the vllm extra).

1. madara: the NF cell (generator only: one chat request per question) run with a
   fresh response cache, so every request reaches the engine; wall time of the whole
   cell (retrieval from the snapshot, prompts, one batched ``LLM.chat``, parsing).
2. vLLM alone: the very requests madara sent, rendered with the engine's tokenizer as
   the backend renders them, in one ``LLM.generate`` call with the same per-request
   ``SamplingParams``.

Prints requests/s and generated tokens/s of both and their ratio.

Usage: python scripts/gpu_throughput.py [--model qwen2.5-0.5b] [--limit 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from madara_cli.backends import make_backend
from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell


class Recorder:
    """The vLLM backend, keeping the chat requests madara sends; ``close`` leaves the
    engine loaded for the second measurement."""

    def __init__(self, inner):
        self.inner, self.name, self.requests = inner, inner.name, []

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def chat(self, requests):
        self.requests.extend(requests)
        return self.inner.chat(requests)

    def next_token_logprobs(self, requests):
        return self.inner.next_token_logprobs(requests)

    def close(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--limit", type=int, default=60)
    args = ap.parse_args()
    results = tempfile.mkdtemp(prefix="madara-gpu-throughput-")
    from madara_cli.composition.plugins import load_plugins

    load_plugins()  # the backends, retrievers and strategies register their schemas
    cfg = compose([f"model={args.model}", "backend=vllm", "benchmark=mini", "strategy=nf", f"limit={args.limit}", f"results_dir={results}"])
    backend = make_backend(cfg)  # loads the weights once, outside both timings
    if hasattr(backend.llm, "reset_prefix_cache"):
        backend.llm.reset_prefix_cache()
    rec = Recorder(backend)
    pool = EnginePool(factory=lambda _cfg: rec)

    t0 = time.perf_counter()
    result = run_cell(cfg, pool)
    madara_s = time.perf_counter() - t0
    acct = result.metrics["accounting"]
    n, out_tokens = acct["calls_issued"], acct["tokens_out"]

    vllm = backend._vllm
    prompts, params = [], []
    for r in rec.requests:
        prompts.append({"prompt_token_ids": backend._encode(backend._render(r.messages))})
        params.append(vllm.SamplingParams(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=r.seed, stop=list(r.stop) or None))
    if hasattr(backend.llm, "reset_prefix_cache"):  # both measurements start with a cold prefix cache
        backend.llm.reset_prefix_cache()
    t0 = time.perf_counter()
    outs = backend.llm.generate(prompts, sampling_params=params, use_tqdm=False)
    raw_s = time.perf_counter() - t0
    raw_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    pool.close()

    print(f"model {args.model} ({backend.fingerprint}), mini benchmark, NF, {len(rec.requests)} requests")
    print(f"{'':<22} {'seconds':>8} {'requests/s':>11} {'gen tokens/s':>13}")
    print(f"{'madara NF cell':<22} {madara_s:>8.2f} {n / madara_s:>11.1f} {out_tokens / madara_s:>13.1f}")
    print(f"{'madara engine time':<22} {acct['seconds']:>8.2f} {n / max(acct['seconds'], 1e-9):>11.1f} {out_tokens / max(acct['seconds'], 1e-9):>13.1f}")
    print(f"{'vLLM generate alone':<22} {raw_s:>8.2f} {len(outs) / raw_s:>11.1f} {raw_tokens / raw_s:>13.1f}")
    print(f"madara cell / vLLM alone, tokens/s: {(out_tokens / madara_s) / (raw_tokens / raw_s):.2f}")
    backend.close()


if __name__ == "__main__":
    main()
