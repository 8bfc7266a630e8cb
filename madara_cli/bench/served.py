"""``madara bench --only openai_pool``: the openai backend's pooled client (keep-alive)
against a new connection per request, on a real local server, in one run.

llama-cpp-python's server (``python -m llama_cpp.server``, the ``server`` extra) serves the
embedded GGUF on a free port of 127.0.0.1 to two ``backend=openai`` engines, alike but for
keep-alive; passes alternate A-B-A-B so load drifts hit both alike. Two workloads:

* **transport** -- ``GET /v1/models``, the cheapest request: the client's own cost per
  request, connection set-up included.
* **score** -- the first ``--docs`` logprob score requests of one real stage (``max_tokens=1``,
  a few hundred prompt tokens), sent as the backend sends them, ``max_in_flight`` at a time.

Each gives requests/s with and without keep-alive and their ratio. On 127.0.0.1 a handshake
costs tens of microseconds, so the score ratio says how much of a CPU forward pass the
connection is; across a network or TLS it is a round trip or more, and transport is the bound.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
PASSES = 2  # timed passes of each mode, alternating, after one untimed pass of each
TRANSPORT_REQUESTS = 200


def missing_server_modules() -> list[str]:
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_server(gguf: Path, log: Path, n_ctx: int = 2048, n_threads: int | None = None, port: int | None = None,
                 start_timeout_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1 serving ``gguf``: (base URL with
    ``/v1``, the process), stopped on exit; RuntimeError with the end of its log when it does not come up."""
    import urllib.request

    port = port or free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx)]
    if n_threads:  # prompt evaluation too: llama.cpp's threads spin, and extra ones on a busy machine cost more than they give
        cmd += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server did not come up in {start_timeout_s:.0f} s: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.3)
        yield base_url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def bench_openai_pool(cfg, scratch: Path, n_scores: int, n_threads: int | None, transport_requests: int = TRANSPORT_REQUESTS) -> dict[str, Any]:
    """``cfg``: composed with ``backend=openai`` (``base_url`` becomes the server started here);
    ``n_scores``: score requests per pass (the first question's first); ``n_threads``: the server's."""

    from madara_cli.backends.openai_backend import openai_backend
    from madara_cli.backends.weights import resolve_gguf
    from madara_cli.bench.engine_agreement import stage_requests

    missing = missing_server_modules()
    if missing:
        return {"skipped": f"llama.cpp's server is not installed ({', '.join(missing)}): pip install 'llama-cpp-python[server]' (make setup)"}
    if not cfg.model.get("gguf"):
        return {"skipped": f"model {cfg.model.name} has no model.gguf for llama.cpp's server to serve"}
    scores = stage_requests(cfg, 1, "logprob", temperature=0.0, max_tokens=1)[1][:n_scores]
    with llama_server(resolve_gguf(str(cfg.model.gguf)), scratch / "llama-server.log", n_threads=n_threads) as (base_url, _):
        # The server answers one completion at a time: requests in flight queue there, so the
        # deadline (which counts the queue) is set well above a pass.
        served = cfg.merged({"backend": {"base_url": base_url, "timeout_s": 1800}})
        engines = {"pooled": openai_backend(served, keep_alive=True), "per_request": openai_backend(served, keep_alive=False)}
        try:
            work = {
                "transport": lambda b: [b._call("GET", "/models", retries=0) for _ in range(transport_requests)],
                "score": lambda b: b.next_token_logprobs(scores),
            }
            counts = {"transport": transport_requests, "score": len(scores)}
            seconds: dict[str, dict[str, float]] = {w: {m: 0.0 for m in engines} for w in work}
            for w, fn in work.items():
                for b in engines.values():  # untimed: the server's first shapes, the client's first connections
                    fn(b)
                for p in range(PASSES):
                    order = list(engines) if p % 2 == 0 else list(reversed(engines))
                    for mode in order:
                        t0 = time.perf_counter()
                        fn(engines[mode])
                        seconds[w][mode] += time.perf_counter() - t0
            identity = engines["pooled"].served
            in_flight = int(cfg.backend.max_in_flight)
        finally:
            for b in engines.values():
                b.close()
    out: dict[str, Any] = {"server": identity, "max_in_flight": in_flight, "passes": PASSES}
    for w in work:
        n = counts[w] * PASSES
        pooled, fresh = _rate(n, seconds[w]["pooled"]), _rate(n, seconds[w]["per_request"])
        out[w] = {"requests_per_pass": counts[w], "requests_per_s_pooled": round(pooled, 2), "requests_per_s_per_request_connection": round(fresh, 2)}
        out[f"ratio_pooled_vs_per_request_{w}"] = round(pooled / fresh, 3) if fresh > 0 else None
    out["notes"] = [
        "pooled: one httpx client, connections kept alive (what backend=openai does); per_request: the same client with keep-alive off,"
        " a new TCP connection per request (what the urllib transport before it did)",
        "server: llama-cpp-python's, on 127.0.0.1, serving the model's GGUF; it answers one completion at a time",
    ]
    return out
