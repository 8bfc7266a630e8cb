"""The openai backend's reading of server replies: each reply is checked before it becomes a
Completion (which the cache keeps for good), and one that fails raises ValueError, which the
backend turns into a one-line InvalidReply with nothing cached."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from madara_cli.core.errors import BackendError


class InvalidReply(BackendError):
    """A reply that is not a completion madara can use; it is never cached."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str, limit: int = 300) -> str:
    """Server text as one printable line: whitespace collapsed, control characters (terminal escapes) escaped, cut at ``limit``."""
    line = " ".join(str(text).split())
    line = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_json(raw: bytes) -> Any:
    """The body as JSON; ValueError for anything else (a body nested too deeply included)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None


def server_message(body: bytes) -> str:
    """The error text of an OpenAI-style, FastAPI-style or plain-text error body."""
    raw = body.decode("utf-8", errors="replace")
    try:
        data = parse_json(body)
    except ValueError:
        return one_line(raw) or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return one_line(err["message"])
        if isinstance(err, str):
            return one_line(err)
        detail = data.get("detail")
        if isinstance(detail, list):  # FastAPI validation errors
            first = [d for d in detail if isinstance(d, dict)][:3]
            more = f" (and {len(detail) - len(first)} more)" if len(detail) > len(first) else ""
            return one_line("; ".join(f"{'.'.join(map(str, d.get('loc', ())))}: {d.get('msg', '')}" for d in first) + more)
        if detail:
            return one_line(detail)
        if data.get("message"):
            return one_line(data["message"])
    return one_line(raw)


def match_candidates(top: dict[str, float], candidates: Sequence[str]) -> dict[str, float]:
    """Candidate -> its first token's log-probability from a top-k list keyed by token text:
    the entry spelt exactly like it (digits and Yes/No are single tokens); else the entry
    whose text, without leading whitespace or word-start marker (``▁``, ``Ġ``: some servers
    show raw pieces), is its longest non-empty prefix (``" Yes"`` for ``"Yes"``), ties to the
    likelier; else ``-inf`` (outside the top k)."""
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


def reply_text(value: Any, field: str) -> str:
    """A reply's text: a string, or a list of parts (``[{"type": "text", "text": ...}]`` from
    several gateways) whose text parts are joined; other types (reasoning, refusals) are left out."""
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
    raise ValueError(f"{field} is {type(value).__name__} {one_line(json.dumps(value), 40)}, not text")


def usage_count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() or value < 0):
        raise ValueError(f"usage.{name} is {one_line(json.dumps(value), 40)}, not a count")
    return int(value or 0)


def reply_usage(res: dict[str, Any]) -> dict[str, Any]:
    usage = res.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ValueError("usage is not an object")
    return usage or {}


def first_choice(res: Any) -> dict[str, Any]:
    if not isinstance(res, dict):
        raise ValueError(f"the body is a JSON {type(res).__name__}, not an object")
    choices = res.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the body has no choices[0] object")
    return choices[0]


def finish_reason(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("finish_reason is not a string")
    return "stop" if reason is None else reason


def _logprob(value: Any, token: str) -> float | None:
    """A log-probability: a number at most 0 (-inf is no mass); None stays absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"the log-probability of {one_line(repr(token), 40)} is {one_line(json.dumps(value), 40)}, not a number")
    lp = float(value)
    if math.isnan(lp) or lp > 1e-6:
        raise ValueError(f"the log-probability of {one_line(repr(token), 40)} is {lp}, not a log-probability")
    return min(lp, 0.0)


def top_logprobs(choice: dict[str, Any]) -> dict[str, float]:
    """The first position's top list of a /completions choice (legacy dict, or the chat-style
    list of {token, logprob} some servers return), every entry checked."""
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


def origin(url: str) -> str:
    """``url`` without user info, query or fragment (what provenance may record)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
