"""The typed records that flow through a cell, all frozen dataclasses (hashed, cached, compared;
no loose dicts for identities or payloads)."""

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
    """One benchmark query: ``answers``, every gold alias (FEVER: SUPPORTS or REFUTES); ``docs``,
    the dataset's own (CONFLICTS evidence, MuSiQue paragraphs), after retrieval the top-k in rank order."""

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
    """A chat generation request, its sampling parameters in it (one vLLM ``SamplingParams``, one
    ``/v1/chat/completions`` body, all seen by the cache key). ``prefix`` begins the assistant
    turn for the model to continue (the RSC probe's perturbed chain); the text is what follows."""

    messages: tuple[Message, ...]
    max_tokens: int = 64
    temperature: float = 0.6
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    prefix: str = ""

    def canonical(self) -> dict[str, Any]:
        # dataclasses.asdict's result built directly: its deep copy was most of the cost of a cache key
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
    """Next-token log-probabilities over ``candidates`` after the assistant's ``prefix`` (0-5 digit scores, MAIN-RAG's Yes/No judge)."""

    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    prefix: str = ""

    def canonical(self) -> dict[str, Any]:
        return {"kind": "score", "messages": tuple({"role": m.role, "content": m.content} for m in self.messages),
                "candidates": tuple(self.candidates), "prefix": self.prefix}


def sampling_seed(request: ChatRequest) -> int:
    """The seed an engine samples ``request`` with, derived from all of it (the cell's seed too):
    each request gets a stream of its own, deterministically (``request.seed`` itself would start
    every request of a cell at one point, as vLLM seeds per request); self-consistency repeats differ in seed."""
    payload = json.dumps(request.canonical(), sort_keys=True, ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(payload.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Completion:
    """A backend's answer to one request. For a ScoreRequest ``text`` is empty and ``logprobs``
    maps each candidate to its next-token log-probability (``-inf``: no mass in the engine's top
    list); ``truncated``: the prompt was cut to fit the context window."""

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
