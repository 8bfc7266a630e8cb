"""OpenAI-compatible HTTP backend: any server with ``/v1/chat/completions`` and
``/v1/completions`` (``vllm serve``, llama.cpp's ``llama-server``, SGLang;
llama-cpp-python's server takes text prompts only), so that many workers can share one
served model.

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
* **transport** (:mod:`madara_cli.backends.http_client`): one pooled httpx client with
  keep-alive, at most ``max_in_flight`` requests in flight (a thread pool of that size);
  ``timeout_s`` is each attempt's wall time from connect to the last byte; no redirect
  is followed (a 3xx is one line naming its Location: following it would carry the API
  key to another origin); 429, 5xx, connection resets and time-outs are retried
  ``retries`` times with exponential backoff (honouring ``Retry-After``), and what
  outlasts them ends with the line that says a rerun resumes; a refused connection
  (before the server ever answered) and any other 4xx fail at once with a one-line
  :class:`BackendError`. ``Completion.seconds`` is each request's round trip; requests
  overlap, so a stage's sum exceeds its wall time.
* **replies** are checked before they become a Completion, which the cache keeps for
  good: the text a string or a list of text parts (joined), counts non-negative
  integers, log-probabilities numbers at most 0. A reply that fails is an
  :class:`InvalidReply` (one line naming what is wrong) and nothing of it is cached.

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

The fingerprint is ``openai:{base_url}:{model}`` (the URL without user info: a password
in ``base_url`` authenticates the requests and is never kept, shown or keyed), plus the model id the server reports
in ``/models`` when it has that endpoint and it differs (llama.cpp reports the GGUF
path), plus the server's software and version when it says them (``vllm-0.32.0``,
``llama-cpp-python-0.3.36``: the engine that answers, as ``backend=vllm`` keys vLLM's
version), plus the chat settings when they are not the defaults. The same identity
(``served``) goes into each cell's provenance.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from omegaconf import DictConfig, OmegaConf

from madara_cli.backends.base import CONTEXT, Backend, BackendSpec, OnDone
from madara_cli.backends.chat import ChatSettings
from madara_cli.backends.http_client import Failed, PooledClient, Refused, Reply, Transient
from madara_cli.backends.prompt_tokenizers import PromptTokenizer, message_dicts, tokenizer_loader
from madara_cli.backends.truncate import fit_messages
from madara_cli.backends.weights import resolve_gguf
from madara_cli.config.schema import BackendConfig, Tokenizer
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
PROBE_TIMEOUT_S = 10.0  # the /models probe at start-up: a dead host should not hang a run
IDENTITY_TIMEOUT_S = 3.0  # each probe of the server's software and version (optional answers)


class Unreachable(BackendError):
    """Nothing listens at ``base_url`` (connection refused)."""


class InvalidReply(BackendError):
    """A reply that is not a completion madara can use; it is never cached."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str, limit: int = 300) -> str:
    """Server text as one printable line: whitespace collapsed, other control
    characters (terminal escapes) shown escaped, cut at ``limit``."""
    line = " ".join(str(text).split())
    line = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _json(raw: bytes) -> Any:
    """The body as JSON; ValueError for anything else (a body nested too deeply included)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None


def _server_message(body: bytes) -> str:
    """The error text of an OpenAI-style, FastAPI-style or plain-text error body."""
    raw = body.decode("utf-8", errors="replace")
    try:
        data = _json(body)
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
            first = [d for d in detail if isinstance(d, dict)][:3]
            more = f" (and {len(detail) - len(first)} more)" if len(detail) > len(first) else ""
            return _one_line("; ".join(f"{'.'.join(map(str, d.get('loc', ())))}: {d.get('msg', '')}" for d in first) + more)
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


# -- replies ----------------------------------------------------------------------------
# Every reply is checked before it becomes a Completion (which the cache then keeps for
# good): a reply that fails is an InvalidReply, one line, and nothing of it is stored.


def _text(value: Any, field: str) -> str:
    """A reply's text: a string, or a list of parts (several gateways send
    ``[{"type": "text", "text": ...}, ...]``) whose text parts are joined; parts of
    other types (reasoning, refusals) are not the answer and are left out."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in ("text", "output_text"):
                if not isinstance(part.get("text"), str):
                    raise ValueError(f"{field} holds a text part whose text is not a string")
                texts.append(part["text"])
            elif not (isinstance(part, dict) and isinstance(part.get("type"), str)):
                raise ValueError(f"{field} holds a part that is neither text nor a typed object")
        if not texts:
            raise ValueError(f"{field} is a list of parts without a text part")
        return "".join(texts)
    if value is None:
        raise ValueError(f"{field} is null: the server sent no text")
    raise ValueError(f"{field} is {type(value).__name__} {_one_line(json.dumps(value), 40)}, not text")


def _count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() or value < 0:
        raise ValueError(f"usage.{name} is {_one_line(json.dumps(value), 40)}, not a count")
    return int(value)


def _usage(res: dict[str, Any]) -> dict[str, Any]:
    usage = res.get("usage")
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise ValueError("usage is not an object")
    return usage


def _first_choice(res: Any) -> dict[str, Any]:
    if not isinstance(res, dict):
        raise ValueError(f"the body is a JSON {type(res).__name__}, not an object")
    choices = res.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the body has no choices[0] object")
    return choices[0]


def _finish_reason(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if reason is None:
        return "stop"
    if not isinstance(reason, str):
        raise ValueError("finish_reason is not a string")
    return reason


def _logprob(value: Any, token: str) -> float | None:
    """A log-probability: a number at most 0 (-inf is no mass); None stays absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"the log-probability of {_one_line(repr(token), 40)} is {_one_line(json.dumps(value), 40)}, not a number")
    lp = float(value)
    if math.isnan(lp) or lp > 1e-6:
        raise ValueError(f"the log-probability of {_one_line(repr(token), 40)} is {lp}, not a log-probability")
    return min(lp, 0.0)


def _top_logprobs(choice: dict[str, Any]) -> dict[str, float]:
    """The first position's top list from a /completions choice (legacy dict form, or
    the chat-style list of {token, logprob} some servers return), every entry checked."""
    lp = choice.get("logprobs") or {}
    if not isinstance(lp, dict):
        raise ValueError("logprobs is not an object")
    tops = lp.get("top_logprobs") or []
    if not isinstance(tops, list):
        raise ValueError("logprobs.top_logprobs is not a list")
    if tops:
        if not isinstance(tops[0], dict):
            raise ValueError("logprobs.top_logprobs[0] is not an object")
        pairs = list(tops[0].items())
    else:
        content = lp.get("content") or []
        if not isinstance(content, list) or (content and not isinstance(content[0], dict)):
            raise ValueError("logprobs.content is not a list of objects")
        entries = content[0].get("top_logprobs", []) if content else []
        if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("token"), str) for e in entries):
            raise ValueError("logprobs.content[0].top_logprobs is not a list of {token, logprob}")
        pairs = [(e["token"], e.get("logprob")) for e in entries]
    out = {}
    for token, value in pairs:
        checked = _logprob(value, token)
        if checked is not None:
            out[token] = checked
    return out


def _origin(url: str) -> str:
    """``url`` without user info, query or fragment (what provenance may record)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class HTTPStatus(BackendError):
    """The server answered with an error status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


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
        require_listed: bool = False,
        keep_alive: bool = True,
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
            # Loaded now, not at the first request: a tokenizer that cannot be had is
            # one line before any stage starts.
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
                raise BackendError(f"{method} {shown} failed{tries}: {_one_line(redact(str(e)))}; {RESUME_HINT}") from None
            except Failed as e:
                raise BackendError(f"{method} {shown} failed: {_one_line(redact(str(e)))}") from None
            self._answered = True
            if 300 <= reply.status < 400:
                raise BackendError(self._redirect_line(method, shown, reply))
            if reply.status >= 400:
                if self._refuses_token_ids(reply, body):
                    raise HTTPStatus(self._token_ids_line(reply), reply.status)
                if reply.status in RETRY_STATUS and not last:
                    time.sleep(self._backoff(attempt, reply.headers.get("retry-after")))
                    continue
                raise HTTPStatus(self._status_line(method, shown, reply, body, tries), reply.status)
            try:
                return _json(reply.body)
            except ValueError as e:
                raise InvalidReply(f"{method} {shown} returned a body that is not JSON ({e}): {_one_line(reply.body.decode('utf-8', 'replace'))}") from None
        raise AssertionError("unreachable")

    def _redirect_line(self, method: str, url: str, reply: Reply) -> str:
        where = _one_line(redact(reply.headers.get("location") or "(no Location)"), 200)
        return (f"{method} {url} answered HTTP {reply.status} redirecting to {where}; madara follows no redirect (it would carry "
                f"the API key to wherever it points): set backend.base_url to the address that answers")

    @staticmethod
    def _refuses_token_ids(reply: Reply, body: dict[str, Any] | None) -> bool:
        """A token-id prompt the server would not read: llama-cpp-python's server
        validates ``prompt`` as text and answers 500 (422 in other versions) with a
        validation error per token."""
        if not isinstance((body or {}).get("prompt"), list) or reply.status not in (400, 422, 500):
            return False
        text = reply.body[:4096].decode("utf-8", "replace").lower()
        return reply.status != 500 or "validation error" in text or "valid string" in text

    def _token_ids_line(self, reply: Reply) -> str:
        return (f"the server at {self.base_url} refuses prompts given as token ids (HTTP {reply.status}); madara sends one when a "
                "document or question holds the model's control text, which a text prompt would turn into control tokens: "
                "serve the model with vllm serve, llama.cpp's llama-server or SGLang (they take token ids), or use backend=llamacpp")

    def _status_line(self, method: str, url: str, reply: Reply, body: dict[str, Any] | None, tries: str) -> str:
        line = f"{method} {url} failed{tries} with HTTP {reply.status}: {redact(_server_message(reply.body))}"
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

    def _names_the_model(self, name: str) -> bool:
        """Whether a name a server gives (in ``/models``, in a reply) is the model's: its name,
        a dated snapshot of it (``gpt-4o-mini-2024-07-18``), an alias or an alias's file name."""
        files = {a.rsplit("/", 1)[-1] for a in self.aliases}
        return name == self.model or name.startswith(self.model + "-") or name in self.aliases or name.rsplit("/", 1)[-1] in files

    def _served_model(self, require_listed: bool) -> dict[str, Any] | None:
        """The entry of ``/models`` that names the model; None without that endpoint. A
        server that lists one model, another one, is refused here (so is one that does not
        list ``backend.served_model_name``: ``require_listed``); one that lists several,
        none of them the model, is warned about (its replies say what answered)."""
        probe = {"timeout_s": min(self.timeout_s, PROBE_TIMEOUT_S), "retries": min(self.retries, 2)}
        try:
            listing = self._call("GET", "/models", **probe)
        except Unreachable:
            raise
        except HTTPStatus as e:
            if e.status == 404:
                self._check_v1()
            return None  # no /models endpoint: the fingerprint goes without it
        except BackendError:
            return None
        data = listing.get("data") if isinstance(listing, dict) else None
        models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]] if isinstance(data, list) else []
        ids = [m["id"] for m in models]
        shown = ", ".join(_one_line(i, 120) for i in ids[:10]) + (f" (and {len(ids) - 10} more)" if len(ids) > 10 else "")
        if require_listed and ids and self.model not in ids:
            raise BackendError(f"backend.served_model_name={_one_line(self.model, 120)!r} is not served at {self.base_url}; it serves: {shown}")
        mine = next((m for m in models if m["id"] == self.model), None) or next((m for m in models if self._names_the_model(m["id"])), None)
        if mine is not None or not models:
            return mine
        wanted = _one_line(self.model, 120)
        if len(models) == 1:
            raise BackendError(f"{self.base_url} serves {shown}, not {wanted!r}: point backend.base_url at the server of {wanted!r}, "
                               f"or set backend.served_model_name={shown} if that is the same model")
        log.warning("%s lists %s, none of them %r: what answers is the server's choice (each cell records the model its replies name)",
                    self.base_url, shown, wanted)
        return models[0]

    def _check_v1(self) -> None:
        """``/models`` answered 404: when the same server answers under ``/v1``, the
        base URL lacks it."""
        if urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            return
        try:
            self._call("GET", "/v1/models", timeout_s=min(self.timeout_s, PROBE_TIMEOUT_S), retries=0)
        except BackendError:
            return
        raise BackendError(f"backend.base_url={self.base_url} has no /v1: the server answers at {self.base_url}/v1 "
                           f"(set backend.base_url={self.base_url}/v1)")

    def _identify(self, served: dict[str, Any] | None) -> dict[str, Any]:
        """What answers, as far as the server says: the model id it reports and its
        software and version (vLLM: ``GET /version`` beside the models' ``owned_by:
        vllm``; llama.cpp's ``llama-server``: ``GET /props``' ``build_info``;
        llama-cpp-python's server: its OpenAPI title and version). Each probe is optional
        and short; what no probe answers stays None."""
        parts = urlsplit(self._url)
        root = urlunsplit((parts.scheme, parts.netloc, re.sub(r"/v1/?$", "", parts.path), "", ""))
        owner = served.get("owned_by") if served else None
        out: dict[str, Any] = {
            "base_url": _origin(self.base_url),
            "model_id": _one_line(served["id"], 300) if served else None,
            "software": None,
            "version": None,
        }

        def probe(path: str) -> Any:
            try:
                return self._call("GET", path, timeout_s=min(self.timeout_s, IDENTITY_TIMEOUT_S), retries=0, url=root + path)
            except BackendError:
                return None

        version = probe("/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            out["software"] = _one_line(owner, 60) if isinstance(owner, str) and owner else "unknown"
            out["version"] = _one_line(version["version"], 60)
            return out
        props = probe("/props")
        if isinstance(props, dict) and isinstance(props.get("build_info"), str):
            out["software"], out["version"] = "llama.cpp-server", _one_line(props["build_info"], 60)
            return out
        spec = probe("/openapi.json")
        info = spec.get("info") if isinstance(spec, dict) else None
        if isinstance(info, dict) and isinstance(info.get("title"), str) and isinstance(info.get("version"), str):
            title = info["title"]
            if "llama.cpp python" in title.lower():
                out["software"], out["version"] = "llama-cpp-python", _one_line(info["version"], 60)
            elif title.strip() and title.strip() != "FastAPI":  # FastAPI's default title names nothing
                out["software"], out["version"] = _one_line(title, 60), _one_line(info["version"], 60)
        return out

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

    def _answered_by(self, res: Any) -> None:
        """Count the model a reply names; warn once for each name that is not the model's."""
        name = res.get("model") if isinstance(res, dict) else None
        if not isinstance(name, str) or not name:
            return
        name = _one_line(name, 120)
        with self._lock:
            first = name not in self.reply_models
            self.reply_models[name] = self.reply_models.get(name, 0) + 1
        if first and not self._names_the_model(name) and name != self.served_id:
            log.warning("%s answered as %r, not %r: another model may be answering (recorded with the cell)", self.base_url, name,
                        _one_line(self.model, 120))

    def take_reply_models(self) -> dict[str, int]:
        """The models the replies since the last call named, with their counts (a cell's
        provenance takes them when it is written)."""
        with self._lock:
            out, self.reply_models = self.reply_models, {}
        return out

    def _invalid(self, path: str, why: str, res: Any) -> InvalidReply:
        return InvalidReply(f"{self.base_url}{path} sent a reply madara cannot use ({why}); nothing of it was cached: "
                            f"{_one_line(json.dumps(res), 200)}")

    def _send_chat(self, item: tuple[dict[str, Any], bool]) -> Completion:
        body, truncated = item
        path = "/completions" if "prompt" in body else "/chat/completions"
        t0 = time.perf_counter()
        res = self._call("POST", path, body)
        seconds = time.perf_counter() - t0
        self._answered_by(res)
        try:
            choice = _first_choice(res)
            if path == "/completions":
                text = _text(choice.get("text"), "choices[0].text")
            else:
                message = choice.get("message")
                if not isinstance(message, dict):
                    raise ValueError("choices[0].message is not an object")
                text = _text(message.get("content"), "choices[0].message.content")
            usage = _usage(res)
            return Completion(
                text=text,
                tokens_in=_count(usage, "prompt_tokens"),
                tokens_out=_count(usage, "completion_tokens"),
                seconds=seconds,
                finish_reason=_finish_reason(choice),
                truncated=truncated,
            )
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
        t0 = time.perf_counter()
        res = self._call("POST", "/completions", body)
        seconds = time.perf_counter() - t0
        self._answered_by(res)
        try:
            top = _top_logprobs(_first_choice(res))
            tokens_in = _count(_usage(res), "prompt_tokens")
        except ValueError as e:
            raise self._invalid("/completions", str(e), res) from None
        if not top:
            raise BackendError(f"{self.base_url}/completions returned no logprobs; the server must support 'logprobs' on completions")
        return Completion(
            text="",
            tokens_in=tokens_in,
            tokens_out=0,
            seconds=seconds,
            logprobs=match_candidates(top, candidates),
            truncated=truncated,
        )

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
    timeout_s: float = 120.0  # wall-clock seconds per attempt, from connect to the reply's last byte
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
    return openai_backend(cfg)


def openai_backend(cfg: DictConfig, keep_alive: bool = True) -> OpenAIBackend:
    """``backend=openai``'s engine for a composed config; ``keep_alive=False`` opens a
    connection per request (``madara bench --only openai_pool`` compares the two)."""
    from madara_cli.config.validate import check_budgets

    _check_sampling(cfg)
    b = cfg.backend
    backend = OpenAIBackend(
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
        require_listed=bool(b.get("served_model_name")),
        keep_alive=keep_alive,
        aliases=_gguf_names(cfg),
    )
    if not b.n_ctx and backend.reported_n_ctx:  # the server's context: a reply budget must leave room for a prompt in it too
        try:
            check_budgets(OmegaConf.to_container(cfg, resolve=True), BackendError, backend.n_ctx,
                          f"the {backend.n_ctx}-token context {backend.base_url}/models reports (max_model_len)")
        except BackendError:
            backend.close()
            raise
    return backend


def _gguf_names(cfg: DictConfig) -> tuple[str, ...]:
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
