"""Benchmark: what batching order and KV-prefix reuse buy for agent scoring on CPU.

Runs the same logprob scoring stage (3 agents x 10 documents per question, mini
benchmark) three ways, side by side in one process with one loaded model, and prints
seconds per call and ratios:

  reset      every request evaluated from scratch (llama.cpp KV cache cleared)
  doc-major  prefix reuse, requests in document order (agents alternate)
  agent-run  prefix reuse, requests grouped so consecutive ones share a system prompt

Usage: python scripts/bench_scoring.py [--questions 3]
"""

from __future__ import annotations

import argparse
import time

from madara_cli.agents.scoring import score_requests
from madara_cli.backends import make_backend
from madara_cli.config import compose
from madara_cli.data.mini import generate
from madara_cli.data.retrieval import retrieve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=3)
    args = ap.parse_args()
    cfg = compose(["results_dir=/tmp/madara-bench"])
    backend = make_backend(cfg)
    backend.reuse_prefix = True  # off in runs (it changes the numbers); measured here
    examples = retrieve(generate(max(args.questions, 2))[: args.questions], cfg)
    reqs = [r for ex in examples for r in score_requests(ex, cot=False, mode="logprob", max_tokens=64, temperature=0.6, seed=0)]
    by_agent = sorted(reqs, key=lambda r: r.messages[0].content)

    def timed(name, requests, reset):
        llm = backend.llm
        t0 = time.perf_counter()
        for r in requests:
            if reset:
                llm.reset()
            backend.next_token_logprobs([r])
        dt = (time.perf_counter() - t0) / len(requests)
        print(f"{name:10s} {dt:.3f} s/call")
        return dt

    base = timed("reset", reqs, reset=True)
    doc = timed("doc-major", reqs, reset=False)
    agent = timed("agent-run", by_agent, reset=False)
    print(f"speed-up vs reset: doc-major {base / doc:.2f}x, agent-run {base / agent:.2f}x ({len(reqs)} calls each)")


if __name__ == "__main__":
    main()
