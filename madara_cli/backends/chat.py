"""What every backend does around the model's chat template: the per-model chat settings
(:class:`ChatSettings`), thinking stripped from replies (:func:`strip_thinking`), and
untrusted text kept as text (:func:`safe_token_ids`: control tokens come only from the
template, never from a document). docs/running.md, "Untrusted text stays text"."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from madara_cli.config.settings import to_plain
from madara_cli.core.errors import BackendError
from madara_cli.core.records import Message

# Gemma's own later templates (Gemma 3) put the system text before the first user
# text with a blank line between; Gemma-2's refuses a system turn altogether.
FOLD_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ChatSettings:
    """A model's chat-template settings (``model.chat_template_kwargs``, ``model.system_role``)."""

    template_kwargs: dict[str, Any] = field(default_factory=dict)
    system_role: bool = True

    @classmethod
    def from_model(cls, model: Any) -> "ChatSettings":
        """From a composed ``cfg.model`` node (or anything with those attributes)."""
        read = model.get if isinstance(model, Mapping) else functools.partial(getattr, model)
        kwargs, system_role = to_plain(read("chat_template_kwargs", None)), read("system_role", True)
        return cls(template_kwargs=dict(kwargs or {}), system_role=bool(system_role))

    @property
    def is_default(self) -> bool:
        return not self.template_kwargs and self.system_role

    def fingerprint(self) -> str:
        """The suffix these settings add to an engine fingerprint, so replies rendered under others are
        never read back: nothing at the defaults (other models' cache entries keep their keys)."""
        if self.is_default:
            return ""
        parts = []
        if self.template_kwargs:
            parts.append("tpl" + json.dumps(self.template_kwargs, sort_keys=True, separators=(",", ":")))
        if not self.system_role:
            parts.append("nosys")
        return ":chat-" + "-".join(parts)

    def describe(self) -> str:
        """One line for ``madara ls models``."""
        parts = [f"{k}={json.dumps(v)}" for k, v in sorted(self.template_kwargs.items())]
        if not self.system_role:
            parts.append("system turn folded into the first user turn")
        return ", ".join(parts) or "template defaults"

    def conversation(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """The messages as the template is given them."""
        return fold_system(messages) if not self.system_role else tuple(messages)


def fold_system(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Fold leading system text into the first user turn (for templates without a
    system role). A conversation that is only a system turn becomes one user turn."""
    lead = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    system, msgs = [m.content for m in messages[:lead]], list(messages[lead:])
    if not system:
        return tuple(msgs)
    head = FOLD_SEPARATOR.join(system)
    if msgs and msgs[0].role == "user":
        return (Message("user", head + FOLD_SEPARATOR + msgs[0].content), *msgs[1:])
    return (Message("user", head), *msgs)


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.S)


def strip_thinking(text: str) -> tuple[str, bool]:
    """``text`` without its reasoning blocks, and whether it held one: every
    ``<think>...</think>`` block, a ``<think>`` that never closes with all after it (no
    answer in it), and text before an unopened ``</think>`` (templates that open the block)."""
    if _THINK_OPEN not in text and _THINK_CLOSE not in text:
        return text, False
    out = _THINK_BLOCK.sub("", text)
    close = out.find(_THINK_CLOSE)
    if close >= 0 and _THINK_OPEN not in out[:close]:
        out = out[close + len(_THINK_CLOSE) :].lstrip()
    opened = out.find(_THINK_OPEN)
    if opened >= 0:
        out = out[:opened].rstrip()
    return (out.lstrip(), True) if out != text else (text, False)


class ControlText:
    """Finds a tokenizer's control strings (the texts of its special tokens) in text."""

    def __init__(self, specials: Iterable[str]):
        self.specials = sorted({s for s in specials if s}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, self.specials))) if self.specials else None

    def find(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._pattern.finditer(text)] if self._pattern else []

    def holds(self, text: str) -> bool:
        return bool(self._pattern and self._pattern.search(text))


def _content_spans(rendered: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Where each untrusted piece sits in ``rendered``, in order (verbatim, or trimmed as Gemma's and Llama-3's templates do)."""
    spans, cursor = [], 0
    for piece in pieces:
        for text in (piece, piece.strip()):
            at = rendered.find(text, cursor) if text else -1
            if at >= 0:
                spans.append((at, at + len(text)))
                cursor = at + len(text)
                break
        else:
            raise BackendError("the chat template changes message text beyond trimming, so a control string in a document or question "
                               "cannot be kept apart from the template's own; refusing to send it as control tokens")
    return spans


def safe_token_ids(rendered: str, pieces: Sequence[str], control: ControlText, encode_whole: Callable[[str], list[int]],
                   encode_text: Callable[[str], list[int]]) -> list[int]:
    """Token ids of ``rendered`` in which only the template's control strings are control tokens.
    ``pieces``: the untrusted texts it holds, in order; ``encode_whole`` parses special tokens,
    ``encode_text`` reads them as text. Without a control string in any piece it is
    ``encode_whole(rendered)`` (same tokens and cache keys); else the template's control strings
    are encoded alone and the text between them as text (engines split at special tokens anyway)."""
    if not any(control.holds(p) for p in pieces):
        return encode_whole(rendered)
    inside = _content_spans(rendered, [p for p in pieces if p])
    # A control string that starts or ends inside a piece is the piece's, not the template's.
    trusted = [(a, b) for a, b in control.find(rendered) if not any(a < e and s < b for s, e in inside)]
    ids: list[int] = []
    cursor = 0
    for a, b in trusted:
        if a > cursor:
            ids += encode_text(rendered[cursor:a])
        ids += encode_whole(rendered[a:b])
        cursor = b
    if cursor < len(rendered):
        ids += encode_text(rendered[cursor:])
    return ids


def _hf_special_tokens(tok: Any) -> dict[str, int | None]:
    """A Hugging Face tokenizer's special tokens (text -> id): the named ones and every
    added token marked special (Qwen's ``<|im_start|>``, Gemma's ``<start_of_turn>``)."""
    out: dict[str, int | None] = {str(t): None for t in getattr(tok, "all_special_tokens", None) or ()}
    for i, t in (getattr(tok, "added_tokens_decoder", None) or {}).items():
        if getattr(t, "special", False):
            out[str(getattr(t, "content", t))] = int(i)
    return out


def hf_control_strings(tok: Any) -> list[str]:
    return list(_hf_special_tokens(tok))


def hf_encode_text(tok: Any, text: str) -> list[int]:
    """``text`` encoded with its special-token strings as plain text (``split_special_tokens``);
    refuses, rather than sends, a control token a tokenizer without that option still makes."""
    ids = list(tok.encode(text, add_special_tokens=False, split_special_tokens=True))
    special = {i for i in _hf_special_tokens(tok).values() if i is not None} | set(getattr(tok, "all_special_ids", None) or ())
    special.discard(getattr(tok, "unk_token_id", None))  # text outside the vocabulary, not a control token
    if special.intersection(ids):
        raise BackendError(f"the tokenizer {type(tok).__name__} turns control text inside a document or question into control tokens "
                           "even with split_special_tokens=True; upgrade transformers")
    return ids
