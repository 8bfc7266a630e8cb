"""OpenAI-compatible HTTP backend: any server with ``/v1/chat/completions`` and
``/v1/completions`` (``vllm serve``, ``python -m llama_cpp.server``, SGLang), so that
many workers can share one served model.

* **chat**: one ``POST /chat/completions`` per request (messages, temperature, top_p,
  max_tokens, seed, stop); the server applies the model's chat template.
* **scoring**: chat completions cannot portably continue an assistant turn that the
  client has started: vLLM needs ``continue_final_message`` in the body, and
  llama-cpp-python's server ignores unknown fields and closes the final assistant
  message, then opens a new one (a silently wrong prompt). So a ScoreRequest is sent
  as a plain ``POST /completions`` on a prompt rendered *client-side*: the model's
  chat template with ``add_generation_prompt=True``, then the assistant ``prefix``,
  with ``max_tokens=1``, greedy, ``logprobs=20``. The template comes from the same
  source the server uses: the GGUF's metadata when ``model.gguf`` is set (llama.cpp
  server), else the Hugging Face tokenizer of ``model.hf_id@revision`` (vllm serve);
  ``backend.tokenizer`` forces one. When the tokenizer adds BOS to a text prompt (as
  both servers do for ``/completions`` then), the template's leading BOS string is
  removed, so the model sees exactly the tokens the server's own chat rendering gives.
  Reading the answer: the top-20 list maps token *texts* to log-probabilities; a
  candidate takes the entry spelt exactly like it (digits and Yes/No are single
  tokens, so this is the llama.cpp backend's token), else the entry that is the
  longest prefix of it up to leading whitespace (``" Yes"`` for ``"Yes"``), else
  ``-inf`` (outside the top 20). Values are full-vocabulary log-probabilities;
  scorers renormalise.
* **truncation**: :func:`fit_messages` with token counts from the same client-side
  tokenizer, against ``backend.n_ctx``, else the ``max_model_len`` the server reports
  in ``/models`` (vLLM does), else ``model.max_model_len``.
* **transport**: the standard library (``urllib``) on a pool of ``max_in_flight``
  threads, so at most that many requests are in flight; 429, 5xx, connection resets
  and timeouts are retried ``retries`` times with exponential backoff (honouring
  ``Retry-After``); a refused connection and any other 4xx fail at once with a
  one-line :class:`BackendError`. ``Completion.seconds`` is each request's round
  trip; requests overlap, so a stage's sum exceeds its wall time.

* **chat settings** (``backends/chat.py``): ``chat_template_kwargs`` go into every
  ``/chat/completions`` body (the field ``vllm serve`` and SGLang read; llama.cpp's
  servers ignore it, and what thinking gets through is stripped from the reply) and
  into the client-side rendering; with ``system_role: false`` the conversation is
  folded before it is sent or rendered.
* **untrusted text**: a server that receives text parses the special tokens in it, and
  the client cannot stop that. So a request whose content (or assistant prefix) holds a
  special-token string of the client-side tokenizer is rendered here and sent to
  ``/completions`` as a list of token ids, content encoded as plain text (vllm serve,
  llama.cpp's ``llama-server`` and SGLang accept token-id prompts; a server that only
  takes text, such as llama-cpp-python's, refuses the body, and the run stops with its
  message rather than forge a turn). Every other request is sent as before.

The fingerprint is ``openai:{base_url}:{model}``, plus the model id the server reports
in ``/models`` when it has that endpoint (llama.cpp reports the GGUF path), plus the
chat settings when they are not the defaults.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig

from madara_cli.backends.base import Backend, BackendSpec, OnDone, register_backend
from madara_cli.backends.chat import ChatSettings
from madara_cli.backends.prompt_tokenizers import PromptTokenizer, message_dicts, tokenizer_loader
from madara_cli.backends.truncate import fit_messages
from madara_cli.config.schema import BackendConfig, Tokenizer
from madara_cli.errors import BackendError
from madara_cli.plugins.shape import int_range, num_range
from madara_cli.records import ChatRequest, Completion, Message, ScoreRequest, sampling_seed

TOP_LOGPROBS = 20  # vLLM's default --max-logprobs; llama.cpp has no cap
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MARGIN = 8  # tokens of slack between the client's count and the server's
MAX_BACKOFF_S = 30.0
PROBE_TIMEOUT_S = 10.0  # the /models probe at start-up: a dead host should not hang a run


class Unreachable(BackendError):
    """Nothing listens at ``base_url`` (connection refused)."""


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _server_message(body: bytes) -> str:
    """The error text of an OpenAI-style, FastAPI-style or plain-text error body."""
    raw = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(raw)
    except ValueError:
        return _one_line(raw) or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(err["message"])
        if isinstance(err, str):
            return _one_line(err)
        detail = data.get("detail")
        if isinstance(detail, list):  # FastAPI validation errors
            return _one_line("; ".join(f"{'.'.join(map(str, d.get('loc', ())))}: {d.get('msg', '')}" for d in detail if isinstance(d, dict)))
        if detail:
            return _one_line(detail)
        if data.get("message"):
            return _one_line(data["message"])
    return _one_line(raw)


def match_candidates(top: dict[str, float], candidates: Sequence[str]) -> dict[str, float]:
    """Candidate -> log-probability of its first token, read from a top-k list keyed by
    token text: the entry spelt exactly like the candidate; else the entry whose text,
    without leading whitespace or word-start marker (``▁``, ``Ġ``: some servers show raw
    pieces), is the longest non-empty prefix of the candidate, ties to the likelier;
    else ``-inf``."""
    out = {}
    for cand in candidates:
        if top.get(cand) is not None:
            out[cand] = float(top[cand])
            continue
        best_len, best = 0, -math.inf
        for token, lp in top.items():
            piece = token.lstrip().lstrip("\u2581\u0120")
            if lp is not None and piece and cand.startswith(piece):
                if len(piece) > best_len or (len(piece) == best_len and lp > best):
                    best_len, best = len(piece), float(lp)
        out[cand] = best
    return out


def _top_logprobs(choice: dict[str, Any]) -> dict[str, float]:
    """The first position's top list from a /completions choice (legacy dict form, or
    the chat-style list of {token, logprob} some servers return)."""
    lp = choice.get("logprobs") or {}
    tops = lp.get("top_logprobs") or []
    if tops and isinstance(tops[0], dict):
        return {k: v for k, v in tops[0].items() if v is not None}
    content = lp.get("content") or []
    if content:
        return {e["token"]: e["logprob"] for e in content[0].get("top_logprobs", [])}
    return {}


class OpenAIBackend:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Callable[[], PromptTokenizer],
        n_ctx: int | None = None,
        default_n_ctx: int = 4096,
        api_key: str | None = None,
        max_in_flight: int = 8,
        retries: int = 4,
        timeout_s: float = 120.0,
        batch_size: int = 64,
        chat: ChatSettings | None = None,
        sampling: str = "explicit",
    ):
        self.base_url = base_url.rstrip("/")
        self.chat_settings = chat or ChatSettings()
        self.sampling = sampling
        self.model = model
        self.retries = max(0, int(retries))
        self.timeout_s = float(timeout_s)
        self._api_key = api_key
        self._batch_size = batch_size
        self._load_tokenizer = tokenizer
        self._tokenizer: PromptTokenizer | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(max_in_flight)), thread_name_prefix="madara-openai")
        # Fail fast on an unreachable server, and learn what it serves.
        served = self._served_model()
        self.served_id = served.get("id") if served else None
        self.n_ctx = int(n_ctx or (served or {}).get("max_model_len") or default_n_ctx)

    @property
    def fingerprint(self) -> str:
        fp = f"openai:{self.base_url}:{self.model}"
        fp = f"{fp}:{self.served_id}" if self.served_id and self.served_id != self.model else fp
        return fp + sampling_mark(self.sampling) + self.chat_settings.fingerprint()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def tokenizer(self) -> PromptTokenizer:
        if self._tokenizer is None:
            self._tokenizer = self._load_tokenizer()
        return self._tokenizer

    # -- HTTP ------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None, retries: int | None = None
    ) -> dict[str, Any]:
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            last = attempt == retries
            req = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as e:
                try:
                    message = _server_message(e.read())
                except OSError:
                    message = e.reason or "(no body)"
                if e.code in RETRY_STATUS and not last:
                    time.sleep(self._backoff(attempt, e.headers.get("Retry-After")))
                    continue
                raise BackendError(f"{method} {url} failed with HTTP {e.code}: {message}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                reason = e.reason if isinstance(e, urllib.error.URLError) else e
                if isinstance(reason, ConnectionRefusedError):
                    raise Unreachable(f"cannot connect to {self.base_url}: is the server running?") from None
                transient = isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, TimeoutError))
                transient = transient or isinstance(reason, http.client.HTTPException)  # RemoteDisconnected, IncompleteRead
                if transient and not last:
                    time.sleep(self._backoff(attempt, None))
                    continue
                why = "timed out" if isinstance(reason, TimeoutError) else _one_line(str(reason) or type(reason).__name__)
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise BackendError(f"{method} {url} failed{tries}: {why}") from None
            try:
                return json.loads(raw.decode("utf-8"))
            except ValueError:
                raise BackendError(f"{method} {url} returned a body that is not JSON: {_one_line(raw.decode('utf-8', 'replace'))}") from None
        raise AssertionError("unreachable")

    @staticmethod
    def _backoff(attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(MAX_BACKOFF_S, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return min(MAX_BACKOFF_S, 0.5 * 2**attempt) * (1 + 0.1 * random.random())

    def _served_model(self) -> dict[str, Any] | None:
        try:
            listing = self._call("GET", "/models", timeout_s=min(self.timeout_s, PROBE_TIMEOUT_S), retries=min(self.retries, 2))
        except Unreachable:
            raise
        except BackendError:
            return None  # no /models endpoint: the fingerprint goes without it
        data = listing.get("data") if isinstance(listing, dict) else None
        models = [m for m in data or [] if isinstance(m, dict) and m.get("id")]
        for m in models:
            if m["id"] == self.model:
                return m
        return models[0] if models else None

    def _map(self, fn: Callable[[Any], Completion], items: Sequence[Any], on_done: OnDone | None = None) -> list[Completion]:
        """``fn`` over ``items`` in the pool; each result goes to ``on_done`` as it
        arrives (in the calling thread), the first failure cancels what has not started."""
        futures = [self._pool.submit(fn, x) for x in items]
        index = {f: i for i, f in enumerate(futures)}
        try:
            for f in as_completed(futures):
                if f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
                if on_done is not None:
                    on_done(index[f], f.result())
        except BaseException:  # a failure, or Ctrl-C while waiting: what finished is stored already
            for p in futures:
                p.cancel()
            raise
        return [f.result() for f in futures]

    # -- protocol ----------------------------------------------------------------

    # Prompts are rendered, counted and truncated in the calling thread (tokenisers are
    # not all thread-safe); only the HTTP round trips run in the pool.

    reports_each = True  # requests finish one by one; the cache stores each at once

    def chat(self, requests: Sequence[ChatRequest], on_done: OnDone | None = None) -> list[Completion]:
        return self._map(self._send_chat, [self._chat_body(r) for r in requests], on_done)

    def _holds_control(self, r: ChatRequest | ScoreRequest) -> bool:
        check = getattr(self.tokenizer, "holds_control", None)
        return bool(check and check([*(m.content for m in r.messages), r.prefix]))

    def _prompt(self, messages: Sequence[Message], prefix: str, budget: int, safe: bool) -> tuple[dict[str, Any], bool]:
        """A /completions prompt on the client-side rendering, fitted to ``budget``:
        text, or (``safe``) token ids whose control tokens are the template's alone."""
        tok = self.tokenizer
        if safe:
            msgs, truncated = fit_messages(messages, lambda ms: len(tok.token_ids(ms, prefix)), budget)
            return {"model": self.model, "prompt": tok.token_ids(msgs, prefix)}, truncated
        msgs, truncated = fit_messages(messages, lambda ms: tok.count(tok.render(ms) + prefix), budget)
        return {"model": self.model, "prompt": tok.render(msgs) + prefix}, truncated

    def _chat_body(self, r: ChatRequest) -> tuple[dict[str, Any], bool]:
        tok = self.tokenizer
        safe = self._holds_control(r)
        if r.prefix or safe:
            # An assistant prefix cannot portably be continued through /chat/completions
            # (see the module docstring), and a server would parse control text in the
            # messages: a /completions body on the client-side rendering.
            body, truncated = self._prompt(r.messages, r.prefix, self.n_ctx - r.max_tokens - MARGIN, safe)
        else:
            msgs, truncated = fit_messages(r.messages, lambda ms: tok.count(tok.render(ms)), self.n_ctx - r.max_tokens - MARGIN)
            body = {"model": self.model, "messages": message_dicts(self.chat_settings.conversation(msgs))}
            if self.chat_settings.template_kwargs:
                body["chat_template_kwargs"] = dict(self.chat_settings.template_kwargs)
        body.update(temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=sampling_seed(r))
        if self.sampling == "explicit":
            body.update(EXPLICIT_SAMPLING)
        if r.stop:
            body["stop"] = list(r.stop)
        return body, truncated

    def _send_chat(self, item: tuple[dict[str, Any], bool]) -> Completion:
        body, truncated = item
        path = "/completions" if "prompt" in body else "/chat/completions"
        t0 = time.perf_counter()
        res = self._call("POST", path, body)
        seconds = time.perf_counter() - t0
        try:
            choice = res["choices"][0]
            usage = res.get("usage") or {}
            text = choice.get("text") if path == "/completions" else (choice.get("message") or {}).get("content")
            return Completion(
                text=text or "",
                tokens_in=int(usage.get("prompt_tokens") or 0),
                tokens_out=int(usage.get("completion_tokens") or 0),
                seconds=seconds,
                finish_reason=choice.get("finish_reason") or "stop",
                truncated=truncated,
            )
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise BackendError(f"{self.base_url}{path} returned an unexpected body: {_one_line(json.dumps(res))}") from e

    def next_token_logprobs(self, requests: Sequence[ScoreRequest], on_done: OnDone | None = None) -> list[Completion]:
        return self._map(self._send_score, [self._score_body(r) for r in requests], on_done)

    def _score_body(self, r: ScoreRequest) -> tuple[dict[str, Any], bool, tuple[str, ...]]:
        body, truncated = self._prompt(r.messages, r.prefix, self.n_ctx - 1 - MARGIN, self._holds_control(r))
        body.update(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS)
        return body, truncated, r.candidates

    def _send_score(self, item: tuple[dict[str, Any], bool, tuple[str, ...]]) -> Completion:
        body, truncated, candidates = item
        t0 = time.perf_counter()
        res = self._call("POST", "/completions", body)
        seconds = time.perf_counter() - t0
        try:
            choice = res["choices"][0]
        except (KeyError, IndexError, TypeError) as e:
            raise BackendError(f"{self.base_url}/completions returned an unexpected body: {_one_line(json.dumps(res))}") from e
        top = _top_logprobs(choice)
        if not top:
            raise BackendError(f"{self.base_url}/completions returned no logprobs; the server must support 'logprobs' on completions")
        usage = res.get("usage") or {}
        return Completion(
            text="",
            tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=0,
            seconds=seconds,
            logprobs=match_candidates(top, candidates),
            truncated=truncated,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        closer = getattr(self._tokenizer, "close", None)
        if closer:
            closer()


# What offline ``LLM.chat`` samples with when a request sets only temperature and top_p:
# no top-k or min-p cut and no repetition penalty. ``vllm serve`` instead fills unset
# fields from the model's generation_config.json (Qwen: top_k 20, repetition_penalty
# 1.05) and llama.cpp's servers from their own defaults (top_k 40, min_p 0.05,
# repeat_penalty 1.1), so the body says each one. top_k 0 means "no cut" to both.
EXPLICIT_SAMPLING = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
SAMPLING_MODES = ("explicit", "minimal")


def sampling_mark(sampling: str) -> str:
    """The fingerprint's note of how requests are sampled: ``:rs`` (a seed per request,
    records.sampling_seed, and every sampling field sent), ``:rs-minimal`` (temperature
    and top_p only: the server's defaults decide the rest)."""
    return ":rs" if sampling == "explicit" else f":rs-{sampling}"


@dataclass
class OpenAIConfig(BackendConfig):
    """``backend=openai``'s settings."""

    base_url: str = "http://127.0.0.1:8000/v1"
    served_model_name: Optional[str] = None  # the server's name for the model; None = model.hf_id
    tokenizer: Optional[Tokenizer] = None  # client-side chat template + token counts: gguf | hf | None (gguf if model.gguf)
    n_ctx: Optional[int] = None  # None = the server's max_model_len if /models reports it, else model.max_model_len
    api_key_env: str = "OPENAI_API_KEY"  # name of the env var holding the key
    max_in_flight: int = 8
    retries: int = 4
    timeout_s: float = 120.0
    # explicit: every sampling field in the body, so `vllm serve` samples as offline
    # LLM.chat does; minimal: temperature and top_p only (APIs that refuse other fields).
    sampling: str = "explicit"


def _fingerprint(cfg: DictConfig) -> str:
    _check_sampling(cfg)
    # known only to the server; cache matches are a lower bound
    return f"{cfg.backend.name}:{cfg.model.hf_id}{sampling_mark(str(cfg.backend.sampling))}"


def _check_sampling(cfg: DictConfig) -> None:
    if str(cfg.backend.sampling) not in SAMPLING_MODES:
        raise BackendError(f"backend.sampling={cfg.backend.sampling!r}: use one of {', '.join(SAMPLING_MODES)}")


def _openai(cfg: DictConfig) -> Backend:
    _check_sampling(cfg)
    b = cfg.backend
    return OpenAIBackend(
        base_url=b.base_url,
        model=b.get("served_model_name") or cfg.model.hf_id,
        tokenizer=tokenizer_loader(cfg),
        n_ctx=b.n_ctx,
        default_n_ctx=cfg.model.max_model_len,
        api_key=os.environ.get(b.api_key_env) if b.api_key_env else None,
        max_in_flight=b.max_in_flight,
        retries=b.retries,
        timeout_s=b.timeout_s,
        batch_size=b.batch_size,
        chat=ChatSettings.from_model(cfg.model),
        sampling=str(b.sampling),
    )


SPEC = register_backend(BackendSpec(
    name="openai", schema=OpenAIConfig, build=_openai, fingerprint=_fingerprint,
    runtime_only=("batch_size", "base_url", "api_key_env", "max_in_flight", "retries", "timeout_s"), package="openai",
    model_inputs=lambda cfg: {},  # the server loads the weights; nothing of this machine's is read
    ranges={"n_ctx": int_range(1, optional=True), "max_in_flight": int_range(1), "retries": int_range(0), "timeout_s": num_range(0.0, lo_open=True)},
    extra="openai", description="any OpenAI-compatible server (vllm serve, llama.cpp's server, SGLang)",
))
