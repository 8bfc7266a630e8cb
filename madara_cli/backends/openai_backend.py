"""OpenAI-compatible HTTP backend: any server with ``/v1/chat/completions`` and
``/v1/completions`` (``vllm serve``, llama.cpp's ``llama-server``, SGLang;
llama-cpp-python's server takes text prompts only), so that many workers share one model.

* **chat**: one ``POST /chat/completions`` per request; the server applies the template.
* **scoring**: chat completions cannot portably continue an assistant turn (vLLM needs
  ``continue_final_message``; llama-cpp-python's server ignores unknown fields and opens a
  new assistant message: a silently wrong prompt). So a ScoreRequest (and a chat request
  with a prefix) is a ``POST /completions`` on a prompt rendered *client-side*
  (:mod:`~madara_cli.backends.prompt_tokenizers`: the GGUF's template when ``model.gguf``
  is set, as llama.cpp renders, else the HF tokenizer of ``model.hf_id@revision``, as
  vllm serve; ``backend.tokenizer`` forces one), ``max_tokens=1``, greedy, ``logprobs=20``,
  read by :func:`match_candidates` (full-vocabulary values; scorers renormalise).
* **truncation**: :func:`fit_messages` with client-side counts against ``backend.n_ctx``,
  else the ``max_model_len`` ``/models`` reports (vLLM), else ``model.max_model_len``.
* **transport** (:mod:`~madara_cli.backends.http_client`): at most ``max_in_flight``
  requests in flight; ``timeout_s`` per attempt; no redirect followed (it would carry the
  API key elsewhere); 429, 5xx, resets and time-outs retried ``retries`` times with
  backoff (honouring ``Retry-After``), then the resume line; a refused connection before
  any answer and other 4xx fail at once. ``Completion.seconds`` is each round trip
  (requests overlap, so a stage's sum exceeds its wall time).
* **replies** are checked (:mod:`~madara_cli.backends.openai_replies`); a bad one is an
  :class:`InvalidReply` and nothing of it is cached.
* **chat settings** (``backends/chat.py``): ``chat_template_kwargs`` go into every chat
  body (vllm serve and SGLang read it; llama.cpp ignores it, and leaked thinking is
  stripped) and the client-side rendering; ``system_role: false`` folds first.
* **untrusted text**: a server parses special tokens in any text, so a request whose
  content or prefix holds one of the tokenizer's special-token strings is sent to
  ``/completions`` as token ids (vllm serve, llama-server, SGLang take them; a text-only
  server refuses, and the run stops rather than forge a turn).

The fingerprint is ``openai:{base_url}:{model}`` (URL without user info: a password in it
authenticates and is never kept, shown or keyed), plus the ``/models`` id when it differs
(llama.cpp reports the GGUF path), plus the server's software and version when it says
them (``vllm-0.32.0``, as ``backend=vllm`` keys vLLM's version), plus non-default chat
settings. The same identity (``served``) goes into provenance.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

from madara_cli.backends.base import CONTEXT, Backend, BackendSpec, OnDone
from madara_cli.backends.chat import ChatSettings
from madara_cli.backends.http_client import Failed, PooledClient, Refused, Reply, Transient
from madara_cli.backends.openai_replies import (
    InvalidReply,
    finish_reason,
    first_choice,
    match_candidates,
    one_line,
    parse_json,
    reply_text,
    reply_usage,
    server_message,
    top_logprobs,
    usage_count,
)
from madara_cli.backends.openai_server import HTTPStatus, ServerProbes, Unreachable
from madara_cli.backends.prompt_tokenizers import PromptTokenizer, message_dicts, tokenizer_loader
from madara_cli.backends.truncate import fit_messages
from madara_cli.backends.weights import resolve_gguf
from madara_cli.config.schema import BackendConfig, Tokenizer
from madara_cli.config.settings import Settings, to_plain
from madara_cli.core.credentials import redact, without_userinfo
from madara_cli.core.errors import RESUME_HINT, BackendError
from madara_cli.core.records import ChatRequest, Completion, Message, ScoreRequest, sampling_seed
from madara_cli.plugins import register
from madara_cli.plugins.shape import int_range, num_range

log = logging.getLogger(__name__)

TOP_LOGPROBS = 20  # vLLM's default --max-logprobs; llama.cpp has no cap
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MARGIN = 8  # tokens of slack between the client's count and the server's
MAX_BACKOFF_S = 30.0


class OpenAIBackend(ServerProbes):
    name = "openai"

    def __init__(
        self, base_url: str, model: str, tokenizer: Callable[[], PromptTokenizer], n_ctx: int | None = None, default_n_ctx: int = 4096,
        api_key: str | None = None, max_in_flight: int = 8, retries: int = 4, timeout_s: float = 120.0, batch_size: int = 64,
        chat: ChatSettings | None = None, sampling: str = "explicit", require_listed: bool = False, keep_alive: bool = True,
        aliases: Sequence[str] = (),
    ):
        self._url = base_url.rstrip("/")  # what requests go to: a password in it is used, never shown or kept
        self.base_url = without_userinfo(self._url)
        self.chat_settings = chat or ChatSettings()
        self.sampling = sampling
        self.model = model
        self.aliases = tuple(aliases)  # other names a server may list the model under (a llama.cpp server: its GGUF's path)
        self.reply_models: dict[str, int] = {}  # the model each reply named, counted (take_reply_models)
        self._lock = threading.Lock()
        self.retries = max(0, int(retries))
        self.timeout_s = float(timeout_s)
        self._api_key = api_key
        self._batch_size = batch_size
        self._load_tokenizer = tokenizer
        self._tokenizer: PromptTokenizer | None = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(max_in_flight)), thread_name_prefix="madara-openai")
        self._http = PooledClient(max_connections=max_in_flight, keep_alive=keep_alive)
        self._answered = False  # the server has answered once: a refusal after that means it went away
        try:
            # Fail fast on an unreachable server, and learn what it serves.
            served = self._served_model(require_listed)
            self.served_id = served.get("id") if served else None
            reported = (served or {}).get("max_model_len")
            self.reported_n_ctx = reported if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0 else None
            self.n_ctx = int(n_ctx or self.reported_n_ctx or default_n_ctx)
            self.served = self._identify(served)
            # Loaded now: a tokenizer that cannot be had is one line before any stage starts.
            self._tokenizer = self._load_tokenizer()
        except BaseException:
            self.close()
            raise

    @property
    def fingerprint(self) -> str:
        fp = f"openai:{self.base_url}:{self.model}"
        fp = f"{fp}:{self.served_id}" if self.served_id and self.served_id != self.model else fp
        software, version = self.served.get("software"), self.served.get("version")
        if software and version:  # the engine that answers, as vLLM's own backend keys its version
            fp = f"{fp}:{software}-{version}"
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
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None, retries: int | None = None,
        url: str | None = None,
    ) -> Any:
        url = url or self._url + path
        shown = without_userinfo(url)
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            last = attempt == retries
            tries = f" after {attempt + 1} attempts" if attempt else ""
            try:
                reply = self._http.request(method, url, data, headers, timeout_s or self.timeout_s)
            except Refused:
                if attempt or self._answered:
                    raise BackendError(f"the server at {self.base_url} went away during {method} {shown} (connection refused); {RESUME_HINT}") from None
                raise Unreachable(f"cannot connect to {self.base_url}: is the server running?") from None
            except Transient as e:
                if not last:
                    time.sleep(self._backoff(attempt, None))
                    continue
                raise BackendError(f"{method} {shown} failed{tries}: {one_line(redact(str(e)))}; {RESUME_HINT}") from None
            except Failed as e:
                raise BackendError(f"{method} {shown} failed: {one_line(redact(str(e)))}") from None
            self._answered = True
            if 300 <= reply.status < 400:
                raise BackendError(self._redirect_line(method, shown, reply))
            if reply.status >= 400:
                if self._refuses_token_ids(reply, body):
                    raise HTTPStatus(self._token_ids_line(reply), reply.status)
                if reply.status in RETRY_STATUS and not last:
                    time.sleep(self._backoff(attempt, reply.headers.get("retry-after")))
                    continue
                raise HTTPStatus(self._status_line(method, shown, reply, tries), reply.status)
            try:
                return parse_json(reply.body)
            except ValueError as e:
                raise InvalidReply(f"{method} {shown} returned a body that is not JSON ({e}): {one_line(reply.body.decode('utf-8', 'replace'))}") from None
        raise AssertionError("unreachable")

    def _redirect_line(self, method: str, url: str, reply: Reply) -> str:
        where = one_line(redact(reply.headers.get("location") or "(no Location)"), 200)
        return (f"{method} {url} answered HTTP {reply.status} redirecting to {where}; madara follows no redirect (it would carry "
                f"the API key to wherever it points): set backend.base_url to the address that answers")

    @staticmethod
    def _refuses_token_ids(reply: Reply, body: dict[str, Any] | None) -> bool:
        """A token-id prompt the server would not read (llama-cpp-python's server validates
        ``prompt`` as text: 500, or 422 in other versions, with a validation error per token)."""
        if not isinstance((body or {}).get("prompt"), list) or reply.status not in (400, 422, 500):
            return False
        text = reply.body[:4096].decode("utf-8", "replace").lower()
        return reply.status != 500 or "validation error" in text or "valid string" in text

    def _token_ids_line(self, reply: Reply) -> str:
        return (f"the server at {self.base_url} refuses prompts given as token ids (HTTP {reply.status}); madara sends one when a "
                "document or question holds the model's control text, which a text prompt would turn into control tokens: "
                "serve the model with vllm serve, llama.cpp's llama-server or SGLang (they take token ids), or use backend=llamacpp")

    def _status_line(self, method: str, url: str, reply: Reply, tries: str) -> str:
        line = f"{method} {url} failed{tries} with HTTP {reply.status}: {redact(server_message(reply.body))}"
        if reply.status == 404 and not urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            line += f"; backend.base_url has no /v1 (OpenAI-compatible servers answer under it: backend.base_url={self.base_url}/v1)"
        if reply.status in RETRY_STATUS:
            line += f"; {RESUME_HINT}"
        return line

    @staticmethod
    def _backoff(attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(MAX_BACKOFF_S, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return min(MAX_BACKOFF_S, 0.5 * 2**attempt) * (1 + 0.1 * random.random())

    def _map(self, fn: Callable[[Any], Completion], items: Sequence[Any], on_done: OnDone | None = None) -> list[Completion]:
        """``fn`` over ``items`` in the pool, each result to ``on_done`` as it arrives (in the
        calling thread); the first failure cancels what has not started."""
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

    # Prompts are rendered, counted and truncated in the calling thread (tokenisers are not
    # all thread-safe); only the HTTP round trips run in the pool.
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

    def _answered_by(self, res: Any) -> None:
        """Count the model a reply names; warn once for each name that is not the model's."""
        name = res.get("model") if isinstance(res, dict) else None
        if not isinstance(name, str) or not name:
            return
        name = one_line(name, 120)
        with self._lock:
            first = name not in self.reply_models
            self.reply_models[name] = self.reply_models.get(name, 0) + 1
        if first and not self._names_the_model(name) and name != self.served_id:
            log.warning("%s answered as %r, not %r: another model may be answering (recorded with the cell)", self.base_url, name,
                        one_line(self.model, 120))

    def take_reply_models(self) -> dict[str, int]:
        """The models the replies since the last call named, counted (for a cell's provenance)."""
        with self._lock:
            out, self.reply_models = self.reply_models, {}
        return out

    def _invalid(self, path: str, why: str, res: Any) -> InvalidReply:
        return InvalidReply(f"{self.base_url}{path} sent a reply madara cannot use ({why}); nothing of it was cached: "
                            f"{one_line(json.dumps(res), 200)}")

    def _post(self, path: str, body: dict[str, Any]) -> tuple[Any, float]:
        """The reply to one POST and its round trip in seconds (the model it names counted)."""
        t0 = time.perf_counter()
        res = self._call("POST", path, body)
        seconds = time.perf_counter() - t0
        self._answered_by(res)
        return res, seconds

    def _send_chat(self, item: tuple[dict[str, Any], bool]) -> Completion:
        body, truncated = item
        path = "/completions" if "prompt" in body else "/chat/completions"
        res, seconds = self._post(path, body)
        try:
            choice = first_choice(res)
            if path == "/completions":
                text = reply_text(choice.get("text"), "choices[0].text")
            else:
                message = choice.get("message")
                if not isinstance(message, dict):
                    raise ValueError("choices[0].message is not an object")
                text = reply_text(message.get("content"), "choices[0].message.content")
            usage = reply_usage(res)
            return Completion(text=text, tokens_in=usage_count(usage, "prompt_tokens"), tokens_out=usage_count(usage, "completion_tokens"),
                              seconds=seconds, finish_reason=finish_reason(choice), truncated=truncated)
        except ValueError as e:
            raise self._invalid(path, str(e), res) from None

    def next_token_logprobs(self, requests: Sequence[ScoreRequest], on_done: OnDone | None = None) -> list[Completion]:
        return self._map(self._send_score, [self._score_body(r) for r in requests], on_done)

    def _score_body(self, r: ScoreRequest) -> tuple[dict[str, Any], bool, tuple[str, ...]]:
        body, truncated = self._prompt(r.messages, r.prefix, self.n_ctx - 1 - MARGIN, self._holds_control(r))
        body.update(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS)
        return body, truncated, r.candidates

    def _send_score(self, item: tuple[dict[str, Any], bool, tuple[str, ...]]) -> Completion:
        body, truncated, candidates = item
        res, seconds = self._post("/completions", body)
        try:
            top = top_logprobs(first_choice(res))
            tokens_in = usage_count(reply_usage(res), "prompt_tokens")
        except ValueError as e:
            raise self._invalid("/completions", str(e), res) from None
        if not top:
            raise BackendError(f"{self.base_url}/completions returned no logprobs; the server must support 'logprobs' on completions")
        return Completion(text="", tokens_in=tokens_in, tokens_out=0, seconds=seconds, logprobs=match_candidates(top, candidates), truncated=truncated)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()
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
    """The fingerprint's note of the sampling: ``:rs`` (a seed per request, records.sampling_seed,
    every field sent), ``:rs-minimal`` (temperature and top_p only; the server decides the rest)."""
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
    timeout_s: float = 120.0  # wall-clock seconds per attempt, from connect to the reply's last byte
    # explicit: every sampling field sent, so `vllm serve` samples as offline LLM.chat;
    # minimal: temperature and top_p only (APIs that refuse other fields).
    sampling: str = "explicit"


def _fingerprint(cfg: Settings) -> str:
    _check_sampling(cfg)
    # known only to the server; cache matches are a lower bound
    return f"{cfg.backend.name}:{cfg.model.hf_id}{sampling_mark(str(cfg.backend.sampling))}"


def _check_sampling(cfg: Settings) -> None:
    if str(cfg.backend.sampling) not in SAMPLING_MODES:
        raise BackendError(f"backend.sampling={cfg.backend.sampling!r}: use one of {', '.join(SAMPLING_MODES)}")


def _openai(cfg: Settings) -> Backend:
    return openai_backend(cfg)


def openai_backend(cfg: Settings, keep_alive: bool = True) -> OpenAIBackend:
    """``backend=openai``'s engine for a composed config; ``keep_alive=False`` opens a
    connection per request (``madara bench --only openai_pool`` compares the two)."""
    from madara_cli.config.validate import check_budgets

    _check_sampling(cfg)
    b = cfg.backend
    backend = OpenAIBackend(
        base_url=b.base_url, model=b.get("served_model_name") or cfg.model.hf_id, tokenizer=tokenizer_loader(cfg), n_ctx=b.n_ctx,
        default_n_ctx=cfg.model.max_model_len, api_key=os.environ.get(b.api_key_env) if b.api_key_env else None,
        max_in_flight=b.max_in_flight, retries=b.retries, timeout_s=b.timeout_s, batch_size=b.batch_size,
        chat=ChatSettings.from_model(cfg.model), sampling=str(b.sampling), require_listed=bool(b.get("served_model_name")),
        keep_alive=keep_alive, aliases=_gguf_names(cfg),
    )
    if not b.n_ctx and backend.reported_n_ctx:  # the server's context: a reply budget must leave room for a prompt in it too
        try:
            check_budgets(to_plain(cfg), BackendError, backend.n_ctx,
                          f"the {backend.n_ctx}-token context {backend.base_url}/models reports (max_model_len)")
        except BackendError:
            backend.close()
            raise
    return backend


def _gguf_names(cfg: Settings) -> tuple[str, ...]:
    """``model.gguf`` as a llama.cpp server lists it (the path it loaded)."""
    gguf = cfg.model.get("gguf")
    if not gguf:
        return ()
    try:
        return (str(resolve_gguf(str(gguf))),)
    except BackendError:
        return (str(gguf),)


SPEC = register(BackendSpec(
    name="openai", schema=OpenAIConfig, build=_openai, fingerprint=_fingerprint,
    # No package: the engine is the server, which provenance records as it reports itself.
    runtime_only=("batch_size", "base_url", "api_key_env", "max_in_flight", "retries", "timeout_s"), package=None,
    model_inputs=lambda cfg: {},  # the server loads the weights; nothing of this machine's is read
    ranges={"n_ctx": CONTEXT, "max_in_flight": int_range(1), "retries": int_range(0), "timeout_s": num_range(0.0, lo_open=True)},
    extra="openai", description="any OpenAI-compatible server (vllm serve, llama.cpp's server, SGLang)",
))
