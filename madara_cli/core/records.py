"""Typed records that flow through a cell: examples, documents, requests, completions,
predictions, and the cell itself.

Everything here is a frozen dataclass so that records can be hashed, cached and
compared; nothing in the pipeline passes loose dicts for identities or payloads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Doc:
    """A retrieved passage. ``id`` is unique within its corpus or question pool."""

    id: str
    text: str
    title: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def render(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Example:
    """One benchmark query.

    ``answers`` holds every gold alias (for FEVER: the label, SUPPORTS or REFUTES).
    ``docs`` holds the dataset's own documents when it ships them (CONFLICTS evidence,
    MuSiQue paragraphs); after retrieval it holds the top-k in rank order.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    docs: tuple[Doc, ...] | None = None
    task: str = "factoid"  # "factoid" | "fever" (SUPPORTS/REFUTES)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


def messages(system: str, user: str) -> tuple[Message, ...]:
    return (Message("system", system), Message("user", user))


@dataclass(frozen=True)
class ChatRequest:
    """A chat generation request. Sampling parameters are part of the request so that
    each one maps onto vLLM's per-request ``SamplingParams`` and onto one
    ``/v1/chat/completions`` body, and so that the cache key sees all of them.

    ``prefix``, when set, is the start of the assistant turn: the model continues it
    (the RSC probe hands the scoring prompt a perturbed chain this way) and the
    completion's text is what comes after it."""

    messages: tuple[Message, ...]
    max_tokens: int = 64
    temperature: float = 0.6
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    prefix: str = ""

    def canonical(self) -> dict[str, Any]:
        # What dataclasses.asdict gives, built directly (a cache key per request: asdict's
        # generic deep copy was most of the cost of hashing one).
        body: dict[str, Any] = {
            "kind": "chat", "messages": tuple({"role": m.role, "content": m.content} for m in self.messages),
            "max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed,
            "stop": tuple(self.stop),
        }
        if self.prefix:  # keys of plain chat requests stay what they were
            body["prefix"] = self.prefix
        return body


@dataclass(frozen=True)
class ScoreRequest:
    """Next-token log-probabilities over ``candidates`` after the assistant has written
    ``prefix``. Used for 0-5 digit scoring and MAIN-RAG's Yes/No judge."""

    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    prefix: str = ""

    def canonical(self) -> dict[str, Any]:
        return {"kind": "score", "messages": tuple({"role": m.role, "content": m.content} for m in self.messages),
                "candidates": tuple(self.candidates), "prefix": self.prefix}


def sampling_seed(request: ChatRequest) -> int:
    """The seed an engine samples ``request`` with: derived from the request's seed (the
    cell's) and everything else it holds, so each request draws from a stream of its
    own, deterministically. Sending ``request.seed`` itself would start every request
    of a cell at the same point of one stream (vLLM seeds a generator per request);
    a request repeated on purpose (self-consistency samples) already differs in seed."""
    payload = json.dumps(request.canonical(), sort_keys=True, ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(payload.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Completion:
    """A backend's answer to one request.

    For a ScoreRequest, ``logprobs`` maps each candidate to its next-token log-probability
    (``-inf`` when the engine gave it no mass in its top list) and ``text`` is empty.
    ``truncated`` is true when the prompt was cut to fit the context window.
    """

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    finish_reason: str = "stop"
    logprobs: dict[str, float] | None = None
    truncated: bool = False
    cached: bool = False


@dataclass(frozen=True)
class Prediction:
    """A strategy's output for one example."""

    example_id: str
    answer: str
    raw: str = ""
    doc_ids: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
