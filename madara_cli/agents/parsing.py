"""Reading the agents' replies: one score per reply, the per-query detector's one
adjustment per document, and the expected digit of a logprob reply.

Source: the MADARA paper, Section 4 and Appendix N (agent outputs).

Conflict adjustments. The Conflict Detector reports an adjustment a in -2..+2.
It enters the 0-5 matrix as ``2.5 + 1.25 * a`` (-2 -> 0, -1 -> 1.25, 0 -> 2.5,
+1 -> 3.75, +2 -> 5): a linear map that sends the neutral verdict to the middle of
the scale and the two extremes to the scale's ends, so the detector weighs as much
as the other agents in the weighted sum and in every rank-based aggregation. In
logprob mode it answers on 0-5 directly with the same anchors (see prompts.py).

Parsing (:func:`parse_score`), in order:

1. JSON: the first ``{...}`` in the reply that decodes to an object holding the
   agent's key (``score``; ``adjustment`` for the Conflict Detector). Code fences
   and text before or after the object are ignored.
2. Key regex: ``key"?\\s*[:=]\\s*"?([+-]?\\d+(\\.\\d+)?)`` anywhere in the reply
   (single quotes, trailing commas, a cut-off CoT object whose score was written).
3. A lone number: the reply is nothing but one number (give or take quotes,
   fences and punctuation), or holds exactly one ``N/5`` / ``N out of 5``. A number
   inside prose ("document [3] is ...") is never taken for a score.
4. Otherwise a failure.

A value outside the agent's range (0-5; -2..+2) is a **failure**, not clipped:
an out-of-range number usually means the model used another scale (0-10, 1-100),
and clipping it would manufacture exactly the 0/5 extremes whose rate we report.
Failures are NaN in the score matrix (:mod:`madara_cli.agents.matrix`) with the
reason kept (``empty``, ``no_score``, ``not_numeric``, ``out_of_range``,
``no_mass``, ``missing_id``).

The per-query detector (:func:`madara_cli.agents.requests.conflict_request`) answers
``{"doc_adjustments": {"1": a1, "2": a2, ...}}``; :func:`parse_doc_adjustments` reads
one adjustment per document number. A number the reply leaves out is a failure
(``missing_id``), imputed like any failed score; when no mapping can be read at all,
every document fails with the reply's reason. In ``logprob`` mode the reply continues
:data:`~madara_cli.agents.requests.DETECTOR_PREFIX` and the same reading applies.

``reading.score_parser=authors`` swaps :func:`parse_score` for
:func:`parse_score_authors`, the authors' reading (:func:`reading_parsers`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from madara_cli.agents.prompts import AGENTS, CONFLICT, DOC_ADJUSTMENTS, SCORE_KEY
from madara_cli.agents.requests import DETECTOR_PREFIX, DIGITS
from madara_cli.core.records import Completion

NEUTRAL = 2.5  # imputation when an agent failed on every document of an example
# Valid range of each agent's raw output (before mapping to 0-5).
RANGE: dict[str, tuple[float, float]] = {"relevance": (0.0, 5.0), "consistency": (0.0, 5.0), "conflict": (-2.0, 2.0)}


def conflict_to_score(adjustment: float) -> float:
    """Conflict Detector adjustment (-2..+2) -> 0-5 score: ``2.5 + 1.25 * a``."""
    return NEUTRAL + 1.25 * float(adjustment)


@dataclass(frozen=True)
class ParsedScore:
    """One agent reply, read. ``value`` is on the 0-5 matrix scale (NaN on failure);
    ``raw_value`` is what the agent wrote (an adjustment for the Conflict Detector)."""

    value: float
    raw_value: float | None = None
    failure: str | None = None  # one of the reasons the module docstring lists, None when valid
    method: str | None = None  # json | regex | lone
    reasoning: tuple[str, ...] = ()
    confidence: int | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


_NUM = r"[+-]?\d+(?:\.\d+)?"
_LONE_OF_FIVE = re.compile(rf"(?<![\w.])({_NUM})\s*(?:/|out of)\s*5\b", re.IGNORECASE)
_ONLY_NUMBER = re.compile(rf"^[\s`'\"*:(\[{{]*({_NUM})[\s`'\"*.!)\]}}]*$")
_STEPS_START = re.compile(r"[\"']?reasoning_steps[\"']?\s*:\s*\[", re.IGNORECASE)
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_CONFIDENCE = re.compile(r"[\"']?confidence[\"']?\s*[:=]\s*\"?(\d+)", re.IGNORECASE)


_KEY_RE = {k: re.compile(rf"[\"']?{k}[\"']?\s*[:=]\s*[\"']?({_NUM})", re.IGNORECASE) for k in set(SCORE_KEY.values())}


def _json_objects(text: str):
    """Every JSON object that starts at some ``{`` of ``text``, in order."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = re.fullmatch(rf"\s*({_NUM})\s*", v)
        if m:
            return float(m.group(1))
    return None


def _steps_from(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(s if isinstance(s, str) else json.dumps(s, ensure_ascii=False) for s in value if s not in (None, ""))
    if isinstance(value, str) and value.strip():
        return (value.strip(),)
    return ()


def _steps_regex(text: str) -> tuple[str, ...]:
    """Reasoning steps from a reply whose JSON does not decode (cut off, malformed):
    the quoted strings after ``reasoning_steps: [`` up to ``]``."""
    m = _STEPS_START.search(text)
    if not m:
        return ()
    rest = text[m.end() :]
    end = rest.find("]")
    body = rest if end < 0 else rest[:end]
    out = []
    for s in _JSON_STRING.findall(body):
        try:
            out.append(json.loads(f'"{s}"'))
        except ValueError:
            out.append(s)
    return tuple(s for s in out if s.strip())


def _confidence(v: Any) -> int | None:
    n = _as_number(v)
    if n is None or not n.is_integer() or not 1 <= n <= 5:
        return None
    return int(n)


def _read_rest(text: str, reasoning: tuple[str, ...] = (), confidence: int | None = None) -> tuple[tuple[str, ...], int | None]:
    """(reasoning, confidence) of a reply: those its JSON object gave, else what the text
    shows (the steps after ``reasoning_steps: [``, a ``confidence: N``)."""
    if confidence is None:
        m = _CONFIDENCE.search(text)
        confidence = _confidence(m.group(1)) if m else None
    return reasoning or _steps_regex(text), confidence


def _checked(raw: float | None, agent: str, method: str | None, **read: Any) -> ParsedScore:
    """The value ``agent`` wrote, checked: a failure when not a number or outside the
    agent's range (never clipped), else on the 0-5 matrix scale."""
    if raw is None:
        return ParsedScore(math.nan, failure="not_numeric")
    lo, hi = RANGE[agent]
    if not (math.isfinite(raw) and lo <= raw <= hi):
        return ParsedScore(math.nan, raw_value=raw, failure="out_of_range", method=method, **read)
    return ParsedScore(conflict_to_score(raw) if agent == CONFLICT else raw, raw_value=raw, method=method, **read)


def parse_score(text: str, agent: str) -> ParsedScore:
    """Read one agent reply (see the module docstring for the rules)."""
    if agent not in RANGE:
        raise ValueError(f"unknown agent '{agent}'; valid: {', '.join(AGENTS)}")
    key = SCORE_KEY[agent]
    if not text or not text.strip():
        return ParsedScore(math.nan, failure="empty")

    raw: float | None = None
    method: str | None = None
    reasoning: tuple[str, ...] = ()
    confidence: int | None = None
    obj = next((o for o in _json_objects(text) if key in o), None)
    if obj is not None:
        raw, method = _as_number(obj[key]), "json"
        reasoning, confidence = _steps_from(obj.get("reasoning_steps")), _confidence(obj.get("confidence"))
    not_numeric = obj is not None and raw is None
    if raw is None:
        m = _KEY_RE[key].search(text)
        if m:
            raw, method, not_numeric = float(m.group(1)), "regex", False
    if raw is None and not not_numeric:
        only = _ONLY_NUMBER.match(text)
        numbers = [only.group(1)] if only else (_LONE_OF_FIVE.findall(text) if agent != CONFLICT else [])
        if len(numbers) == 1:
            raw, method = float(numbers[0]), "lone"
    reasoning, confidence = _read_rest(text, reasoning, confidence)
    if raw is None:
        return ParsedScore(math.nan, failure="not_numeric" if not_numeric else "no_score", reasoning=reasoning, confidence=confidence)
    return _checked(raw, agent, method, reasoning=reasoning, confidence=confidence)


_AUTHORS_SPAN = re.compile(r"\{.*\}", re.DOTALL)
_AUTHORS_DIGIT = re.compile(r"[0-5]")


def parse_score_authors(text: str) -> ParsedScore:
    """The authors' reading of a reply (``reading.score_parser=authors``): the
    ``"score"`` of the span from the first ``{`` to the last ``}``, as an integer
    (4.5 -> 4) clipped to 0-5 (7 -> 5, -1 -> 0); a reply without that span scores 0
    ("Score: 4", "4"); a span that does not decode, lacks ``"score"`` or holds a
    non-integer text gives the reply's first digit 0-5 anywhere (a document number,
    a year's digit), else 0. It never fails, so nothing is imputed; every agent,
    the Conflict Detector included, is read on 0-5 this way."""
    value: float = 0.0
    method = "authors"
    span = _AUTHORS_SPAN.search(text or "")
    if span is not None:
        try:
            value = float(min(5, max(0, int(json.loads(span.group(0))["score"]))))
        except (ValueError, TypeError, KeyError, IndexError, OverflowError):
            digit = _AUTHORS_DIGIT.search(text)
            value, method = (float(digit.group(0)) if digit else 0.0), "authors_digit"
    reasoning, confidence = _read_rest(text or "")
    return ParsedScore(value, raw_value=value, method=method, reasoning=reasoning, confidence=confidence)


def expected_score(logprobs: Mapping[str, float] | None, candidates: Sequence[str] = DIGITS) -> float:
    """``sum_i p_i * value_i`` with ``p`` the candidates' probabilities renormalised
    over the candidates (candidates with ``-inf`` get zero mass); NaN when no
    candidate has any mass."""
    if not logprobs:
        return math.nan
    values = np.array([float(c) for c in candidates])
    lp = np.array([logprobs.get(c, -math.inf) for c in candidates], dtype=float)
    finite = np.isfinite(lp)
    if not finite.any():
        return math.nan
    p = np.zeros_like(lp)
    p[finite] = np.exp(lp[finite] - lp[finite].max())
    p /= p.sum()
    return float(p @ values)


@dataclass(frozen=True)
class DocAdjustments:
    """The per-query detector's reply, read: one :class:`ParsedScore` per document
    (retrieval order; failures NaN), plus what the reply got wrong as a whole."""

    values: tuple[ParsedScore, ...]
    missing_ids: int = 0
    extra_ids: int = 0
    reasoning: tuple[str, ...] = ()
    confidence: int | None = None


_DOC_NUMBER = re.compile(r"(\d+)")
_ADJ_PAIR = re.compile(rf"[\"']?\[?(?:doc(?:ument)?[\s_#-]*)?(\d+)\]?[\"']?\s*[:=]\s*[\"']?({_NUM})", re.IGNORECASE)
_ADJ_START = re.compile(rf"[\"']?{DOC_ADJUSTMENTS}[\"']?\s*[:=]", re.IGNORECASE)


def _number_of(key: Any) -> int | None:
    """Document number of a mapping key or list item id: ``"3"``, ``3``, ``"[3]"``, ``"Doc 3"``."""
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        m = _DOC_NUMBER.search(key)
        return int(m.group(1)) if m else None
    return None


def _mapping_from(value: Any) -> dict[int, Any] | None:
    """{document number: written value} from a decoded ``doc_adjustments`` value: an
    object keyed by number, a list of ``{"doc_id": n, "adjustment": a}`` objects, or a
    plain list in document order."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            n = _number_of(k)
            if n is not None:
                out.setdefault(n, v)
        return out
    if isinstance(value, list):
        if all(isinstance(v, dict) for v in value):
            out = {}
            for item in value:
                n = next((_number_of(item[k]) for k in ("doc_id", "id", "doc", "document") if k in item), None)
                a = next((item[k] for k in ("adjustment", "score", "value") if k in item), None)
                if n is not None:
                    out.setdefault(n, a)
            return out
        return {i + 1: v for i, v in enumerate(value)}
    return None


def parse_doc_adjustments(text: str, m: int) -> DocAdjustments:
    """Read a per-query detector reply for ``m`` documents (numbered 1..m).

    1. JSON: the first object in the reply holding ``doc_adjustments``.
    2. Else number/value pairs (``"3": -1``, ``[3]: -1``, ``Doc 3: -1``) after the first
       ``doc_adjustments:`` (a cut-off or malformed object).
    Each document's value is checked like a per-document adjustment (numeric,
    -2..+2, else ``not_numeric``/``out_of_range``) and mapped to 0-5; a document the
    mapping leaves out is ``missing_id``. Without any mapping every document fails
    with ``empty`` or ``no_score``."""
    reasoning: tuple[str, ...] = ()
    confidence: int | None = None
    mapping: dict[int, Any] | None = None
    for obj in _json_objects(text or ""):
        if DOC_ADJUSTMENTS not in obj:
            continue
        mapping = _mapping_from(obj[DOC_ADJUSTMENTS])
        reasoning = _steps_from(obj.get("reasoning_steps"))
        confidence = _confidence(obj.get("confidence"))
        if mapping is not None:
            break
    if mapping is None and text:
        start = _ADJ_START.search(text)
        if start:
            pairs = _ADJ_PAIR.findall(text[start.end() :])
            if pairs:
                mapping = {}
                for n, v in pairs:
                    mapping.setdefault(int(n), v)
    reasoning, confidence = _read_rest(text or "", reasoning, confidence)
    if mapping is None:
        reason = "empty" if not (text or "").strip() else "no_score"
        return DocAdjustments(tuple(ParsedScore(math.nan, failure=reason) for _ in range(m)), reasoning=reasoning, confidence=confidence)
    values = tuple(_checked(_as_number(mapping[n]), CONFLICT, "per_query") if n in mapping else ParsedScore(math.nan, failure="missing_id")
                   for n in range(1, m + 1))
    return DocAdjustments(values, missing_ids=sum(1 for v in values if v.failure == "missing_id"),
                          extra_ids=sum(1 for n in mapping if not 1 <= n <= m), reasoning=reasoning, confidence=confidence)


def read_conflict_reply(completion: Completion, m: int, mode: str = "generate") -> tuple[DocAdjustments, str]:
    """(parsed, text read) of a per-query detector completion for ``m`` documents. In
    ``logprob`` mode the reply continues :data:`DETECTOR_PREFIX`, which is put back;
    braces the stop string removed are restored."""
    text = (DETECTOR_PREFIX if mode == "logprob" else "") + completion.text
    if completion.finish_reason == "stop" and text.count("{") > text.count("}"):
        text += "}" * (text.count("{") - text.count("}"))
    return parse_doc_adjustments(text, m), text


def parse_completion(completion: Completion, agent: str, mode: str = "generate") -> ParsedScore:
    """Read one agent completion (restoring the ``}`` the stop string removed)."""
    return read_reply(completion, agent, mode)[0]


def read_rescore(completion: Completion, agent: str = "relevance", parser: str = "madara") -> ParsedScore:
    """The score of a generated re-score reply (``rsc.rescore=prefix``): only the
    continuation is read (the chain in the prefix may itself mention scores), as the rest
    of a ``{"confidence": ...`` object, by ``parser`` (``madara`` or ``authors``: the
    authors' parser read the bare continuation ``3, "score": 4`` as no object, 0)."""
    text = '{"confidence": ' + completion.text
    if completion.finish_reason == "stop" and text.count("{") > text.count("}"):
        text += "}"
    parsed = parse_score_authors(text) if parser == "authors" else parse_score(text, agent)
    return ParsedScore(parsed.value, parsed.raw_value, parsed.failure, parsed.method, (), parsed.confidence)


def read_reply(completion: Completion, agent: str, mode: str, parser: str = "madara", stop_sent: bool = True) -> tuple[ParsedScore, str]:
    """(parsed, text read) of one agent completion: the expected digit in ``logprob`` mode
    (the text read is the candidates' log-probabilities as JSON), else the reply with the
    ``}`` the stop string removed put back, read by ``parser`` (``madara`` or ``authors``).
    ``stop_sent``: whether the request sent a stop string. Without one no brace was
    removed, so the authors' parser reads the reply as it came, as their code does (a
    reply that never closed its object scores 0 there); madara's own parser still
    closes an object a reply ended inside, its lenient reading of any reply."""
    if mode == "logprob":
        return _read_logprobs(tuple((c, v, repr(v)) for c, v in (completion.logprobs or {}).items()))
    text = completion.text
    if completion.finish_reason == "stop" and text.count("{") > text.count("}") and (stop_sent or parser != "authors"):
        text += "}"
    return (parse_score_authors(text) if parser == "authors" else parse_score(text, agent)), text


# The candidates' log-probabilities of a score request come back alike wherever the same
# request is asked (the strategies of a grid that share an assessment, a plan's cells):
# what they read as is kept for the last few thousand, by value and repr (the repr tells
# 0, 0.0 and -0.0 apart, equal values whose JSON differs).
@lru_cache(maxsize=4096)
def _read_logprobs(items: tuple[tuple[str, float, str], ...]) -> tuple[ParsedScore, str]:
    """(the expected digit, the log-probabilities as JSON) of a score request's reply:
    ``items`` are its (candidate, log-probability, repr) in the reply's order."""
    lp = {c: v for c, v, _ in items}
    value = expected_score(lp, DIGITS)
    raw = json.dumps({c: (None if not math.isfinite(v) else round(v, 4)) for c, v in lp.items()})
    if math.isnan(value):
        return ParsedScore(math.nan, failure="no_mass"), raw
    return ParsedScore(value, raw_value=value, method="logprob"), raw


def reading_parsers(reading: Any) -> tuple[str, ...]:
    """Each agent's reader under ``reading`` (a ``reading`` config node): the authors'
    parser for every agent with ``score_parser=authors``, and for the Conflict Detector
    with ``conflict=score_field`` (its reply read as a score, as their code does)."""
    reading = reading or {}
    base = str(reading.get("score_parser", "madara"))
    detector = "authors" if str(reading.get("conflict", "adjustment")) == "score_field" else base
    return tuple(detector if a == CONFLICT else base for a in AGENTS)
