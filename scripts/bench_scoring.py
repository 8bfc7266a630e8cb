"""Benchmark: what KV reuse of the system turn buys for agent scoring on CPU.

Runs the same logprob scoring stage (3 agents x 10 documents per question, mini
benchmark) three ways, side by side in one process with one loaded model, and prints
seconds per call, ratios, and whether the scores are identical:

  no-reuse   every request evaluated from an empty KV cache (reuse_prefix=False)
  per-call   reuse on, requests sent one at a time in stage order (agents alternate,
             so consecutive requests rarely share a system turn)
  batched    reuse on, requests sent in batches of backend.batch_size (the backend
             groups each batch by system prompt), as a run sends them

Usage: python scripts/bench_scoring.py [--questions 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

from madara_cli.agents.requests import score_requests
from madara_cli.backends import make_backend
from madara_cli.composition import compose
from madara_cli.data.mini import generate
from madara_cli.retrievers.retrieval import retrieve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from madara_cli.composition.plugins import load_plugins

    load_plugins()  # the backends, retrievers and strategies register their schemas
    cfg = compose(["results_dir=/tmp/madara-bench", f"backend.n_threads={args.threads}"])
    backend = make_backend(cfg)
    examples = retrieve(generate(max(args.questions, 2))[: args.questions], cfg)
    reqs = [r for ex in examples for r in score_requests(ex, cot=False, mode="logprob", max_tokens=64, temperature=0.6, seed=0)]
    step = backend.batch_size

    def timed(name, reuse, batched):
        backend.reuse_prefix = reuse
        t0 = time.perf_counter()
        if batched:
            out = [c for i in range(0, len(reqs), step) for c in backend.next_token_logprobs(reqs[i : i + step])]
        else:
            out = [backend.next_token_logprobs([r])[0] for r in reqs]
        dt = (time.perf_counter() - t0) / len(reqs)
        print(f"{name:10s} {dt:.3f} s/call")
        return dt, [c.logprobs for c in out]

    base, ref = timed("no-reuse", False, False)
    single, s_lp = timed("per-call", True, False)
    batch, b_lp = timed("batched", True, True)
    print(f"speed-up vs no-reuse: per-call {base / single:.2f}x, batched {base / batch:.2f}x ({len(reqs)} calls each, batch {step})")
    print(f"scores identical to no-reuse: per-call {s_lp == ref}, batched {b_lp == ref}")


if __name__ == "__main__":
    main()
