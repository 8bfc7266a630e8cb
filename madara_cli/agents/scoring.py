"""The three-agent scorer (base and CoT), score parsing and the score matrix.

Source: the MADARA paper, Section 4 (three-agent assessment, CoT de-polarization),
Section 5.3 (weighted aggregation 0.4/0.3/0.3) and Appendix N (agent outputs).

Every (document, agent) pair of every example of a cell is one request, and the
whole cell is scored in ONE batched call (stage ``score``, ``score-cot`` or
``score-logprob``), sent agent-major so that a sequential engine reuses each
agent's system prompt from its KV cache. Code outside the strategies that wants
the same cached scores (the RSC probe) builds its requests with :func:`agent_request`. Requests depend only on the example, its retrieved documents,
the agent, the CoT flag, the scoring mode, the generation lengths, the model
temperature and ``cfg.seed`` -- never on the strategy -- so 3-Agent, SDA, ATF, RRF
and PDE read the same cached base scores, and CoT and SDA+CoT the same CoT scores.

Cost (``strategy.conflict``): with ``per_query`` (the default, Appendix N) the
Relevance Assessor and the Consistency Verifier score each document and the Conflict
Detector is asked once per query about all of them: 2 m + 1 calls per query (21 for
the paper's top-10; Table 18's note says "3-Agent/CoT/SDA ~ 19"). ``per_document``
asks the detector about each document like the other two agents: 3 m (30).

The per-query detector (:func:`conflict_request`) sees every document's excerpt under
its retrieval rank and answers ``{"doc_adjustments": {"1": a1, "2": a2, ...}}``;
:func:`parse_doc_adjustments` reads one adjustment per document number. A number the
reply leaves out is a failure (``missing_id``), imputed like any failed score; when
no mapping can be read at all, every document fails with the reply's reason. In
``logprob`` mode one next-token distribution can only hold one document's value, so
the detector's one request is generated instead, greedily (temperature 0), with the
assistant turn begun at the first document's slot (``{"doc_adjustments": {"1": ``):
the model writes the adjustments on -2..+2 in document order, and the same reading
applies. Its stage is the scoring stage's name plus ``-conflict``.

Two scoring modes (``strategy.scoring``):

* ``generate`` -- the agent writes JSON at the model's temperature
  (``generation.score_max_tokens``, or ``cot_max_tokens`` for CoT; base replies
  stop at the first ``}``) and :func:`parse_completion` reads it.
* ``logprob`` -- one forward pass after the assistant prefix ``{"score": ``; the
  score is the expectation sum_i p_i * i over the candidates "0".."5", with the
  probabilities renormalised over the candidates (:func:`expected_score`). CoT has
  no logprob variant (its reasoning must be generated first).

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
Failures are NaN in :attr:`ScoreMatrix.scores` with ``failed`` set and the reason
kept (``empty``, ``no_score``, ``not_numeric``, ``out_of_range``, ``no_mass``);
:meth:`ScoreMatrix.imputed` fills them with the example's mean for that agent (2.5
when the agent failed on every document) for selection, and the failure rate is
reported per cell in ``metrics.json`` under ``assessment``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from madara_cli.agents.prompts import (
    AGENTS,
    CONFLICT,
    DOC_ADJUSTMENTS,
    SCORE_KEY,
    assessor_messages,
    detector_messages,
    forced_rescore_messages,
)
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import Scoring
from madara_cli.records import ChatRequest, Completion, Doc, Example, ScoreRequest

DIGITS: tuple[str, ...] = ("0", "1", "2", "3", "4", "5")
LOGPROB_PREFIX = '{"score": '
NEUTRAL = 2.5  # imputation when an agent failed on every document of an example
SCORING_MODES = tuple(Scoring.__members__)  # generate, logprob (strategy.scoring, rsc.rescoring)
# Base scoring stops at the first "}": {"score": N} is complete there, and a chatty
# model's explanation after it would cost tokens on every one of the 3 m calls per
# query. Engines drop the stop string, so _read puts the brace back before parsing.
# CoT replies are not stopped: a model that writes its steps as objects
# ([{"step": 1, ...}]) would be cut before its score.
SCORE_STOP: tuple[str, ...] = ("}",)

# Valid range of each agent's raw output (before mapping to 0-5).
RANGE: dict[str, tuple[float, float]] = {"relevance": (0.0, 5.0), "consistency": (0.0, 5.0), "conflict": (-2.0, 2.0)}

FAILURE_REASONS = ("empty", "no_score", "not_numeric", "out_of_range", "no_mass", "missing_id")


def conflict_to_score(adjustment: float) -> float:
    """Conflict Detector adjustment (-2..+2) -> 0-5 score: ``2.5 + 1.25 * a``."""
    return NEUTRAL + 1.25 * float(adjustment)


# --------------------------------------------------------------------------- #
# Parsing
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ParsedScore:
    """One agent reply, read. ``value`` is on the 0-5 matrix scale (NaN on failure);
    ``raw_value`` is what the agent wrote (an adjustment for the Conflict Detector)."""

    value: float
    raw_value: float | None = None
    failure: str | None = None  # one of FAILURE_REASONS, None when valid
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


def _key_regex(key: str) -> re.Pattern[str]:
    return re.compile(rf"[\"']?{key}[\"']?\s*[:=]\s*[\"']?({_NUM})", re.IGNORECASE)


_KEY_RE = {k: _key_regex(k) for k in set(SCORE_KEY.values())}


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
    not_numeric = False
    for obj in _json_objects(text):
        if key not in obj:
            continue
        reasoning = _steps_from(obj.get("reasoning_steps"))
        confidence = _confidence(obj.get("confidence"))
        raw = _as_number(obj[key])
        if raw is None:
            not_numeric = True
        method = "json"
        break
    if raw is None:
        m = _KEY_RE[key].search(text)
        if m:
            raw, method, not_numeric = float(m.group(1)), "regex", False
    if raw is None and not not_numeric:
        only = _ONLY_NUMBER.match(text)
        numbers = [only.group(1)] if only else (_LONE_OF_FIVE.findall(text) if agent != CONFLICT else [])
        if len(numbers) == 1:
            raw, method = float(numbers[0]), "lone"
    if not reasoning:
        reasoning = _steps_regex(text)
    if confidence is None:
        m = _CONFIDENCE.search(text)
        confidence = _confidence(m.group(1)) if m else None
    if raw is None:
        return ParsedScore(math.nan, failure="not_numeric" if not_numeric else "no_score", reasoning=reasoning, confidence=confidence)
    lo, hi = RANGE[agent]
    if not (math.isfinite(raw) and lo <= raw <= hi):
        return ParsedScore(math.nan, raw_value=raw, failure="out_of_range", method=method, reasoning=reasoning, confidence=confidence)
    value = conflict_to_score(raw) if agent == CONFLICT else raw
    return ParsedScore(value, raw_value=raw, method=method, reasoning=reasoning, confidence=confidence)


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
    reasoning = _steps_regex(text or "")
    m = _CONFIDENCE.search(text or "")
    return ParsedScore(value, raw_value=value, method=method, reasoning=reasoning, confidence=_confidence(m.group(1)) if m else None)


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


# --------------------------------------------------------------------------- #
# The score matrix
# --------------------------------------------------------------------------- #


@dataclass(frozen=True, eq=False)
class ScoreMatrix:
    """One example's assessment: m documents (rows, retrieval order) x A agents.

    ``scores`` is on the 0-5 scale with NaN where ``failed``; ``raw`` holds each
    agent's reply (for logprob mode, the candidates' log-probabilities as JSON);
    ``reasoning`` and ``confidence`` are filled by CoT scoring.
    """

    example_id: str
    doc_ids: tuple[str, ...]
    agents: tuple[str, ...]
    scores: np.ndarray  # (m, A) float
    failed: np.ndarray  # (m, A) bool
    failure_reasons: tuple[tuple[str | None, ...], ...]
    raw: tuple[tuple[str, ...], ...]
    reasoning: tuple[tuple[tuple[str, ...], ...], ...] = ()
    confidence: tuple[tuple[int | None, ...], ...] = ()
    hit_max_tokens: int = 0  # replies cut by the token limit
    conflict_calls: str = "per_document"  # how the detector column was asked (strategy.conflict)
    missing_ids: int = 0  # per_query: documents the detector's reply gave no adjustment
    extra_ids: int = 0  # per_query: numbers in the reply that name no document

    @property
    def m(self) -> int:
        return self.scores.shape[0]

    def imputed(self) -> np.ndarray:
        """Scores with each failure replaced by the example's mean for that agent
        (:data:`NEUTRAL` when the agent failed on every document)."""
        return impute(self.scores)

    def to_json(self, digits: int = 3) -> list[list[float | None]]:
        return [[None if math.isnan(v) else round(float(v), digits) for v in row] for row in self.scores]


def impute(scores: np.ndarray) -> np.ndarray:
    """Replace NaN by the mean of the finite entries of the same column (agent), or
    :data:`NEUTRAL` for a column without any."""
    s = np.array(scores, dtype=float, copy=True)
    if s.ndim == 1:
        s = s[:, None]
    for j in range(s.shape[1]):
        col = s[:, j]
        bad = ~np.isfinite(col)
        if bad.any():
            good = col[~bad]
            col[bad] = good.mean() if good.size else NEUTRAL
    return s


def _check_mode(mode: str, cot: bool) -> None:
    from madara_cli.errors import ConfigError  # a user-fixable setting: one line, exit 2

    if mode not in SCORING_MODES:
        raise ConfigError(f"unknown strategy.scoring '{mode}'; valid: {', '.join(SCORING_MODES)}")
    if mode == "logprob" and cot:
        raise ConfigError("strategy.scoring=logprob has no CoT variant (the reasoning must be generated); use scoring=generate with cot=true")


def agent_request(
    example: Example, docs: Sequence[Doc], index: int, agent: str, *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int,
    prompts: PromptSet | None = None, stop: tuple[str, ...] | None = None,
) -> ChatRequest | ScoreRequest:
    """The one request of ``agent`` assessing ``docs[index]``, in the words of
    ``prompts`` (the shipped set by default). Anything that wants to share cached
    scores with the strategies (the RSC probe's normal CoT scores) must build its
    requests here."""
    _check_mode(mode, cot)
    if mode == "logprob":
        return ScoreRequest(messages=assessor_messages(example, docs, index, agent, logprob=True, prompts=prompts), candidates=DIGITS, prefix=LOGPROB_PREFIX)
    return ChatRequest(
        messages=assessor_messages(example, docs, index, agent, cot=cot, prompts=prompts),
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        stop=stop if stop is not None else (() if cot else SCORE_STOP),  # reading.requests=authors: () (no stop)
    )


def score_requests(
    example: Example, *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int, agents: Sequence[str] = AGENTS,
    prompts: PromptSet | None = None, stop: tuple[str, ...] | None = None,
) -> list[ChatRequest | ScoreRequest]:
    """The per-document requests of one example, document-major: (doc 0, agent 0),
    (doc 0, agent 1), ... over ``agents`` (all three unless the detector is asked per query).
    ``stop`` replaces the default stop strings (None: :func:`agent_request`'s own)."""
    _check_mode(mode, cot)
    docs = example.docs or ()
    return [
        agent_request(example, docs, i, agent, cot=cot, mode=mode, max_tokens=max_tokens, temperature=temperature, seed=seed, prompts=prompts, stop=stop)
        for i in range(len(docs))
        for agent in agents
    ]


def stage_name(cot: bool, mode: str) -> str:
    return "score-logprob" if mode == "logprob" else ("score-cot" if cot else "score")


CONFLICT_CALLS = ("per_query", "per_document")  # strategy.conflict
# The per-query reply holds one '"10": -2, ' (about 7 tokens) per document on top of
# what a one-document reply needs.
ADJUSTMENT_TOKENS_PER_DOC = 8
DETECTOR_PREFIX = '{"' + DOC_ADJUSTMENTS + '": {"1": '  # logprob mode: the reply starts at document 1's slot


def conflict_stage_name(cot: bool, mode: str) -> str:
    return stage_name(cot, mode) + "-conflict"


def conflict_request(
    example: Example, docs: Sequence[Doc], *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int, prompts: PromptSet | None = None
) -> ChatRequest:
    """The Conflict Detector's one request for a query (``strategy.conflict=per_query``),
    over every document of ``docs``; ``max_tokens`` is the one-document budget, to which
    :data:`ADJUSTMENT_TOKENS_PER_DOC` per document is added."""
    _check_mode(mode, cot)
    budget = int(max_tokens) + ADJUSTMENT_TOKENS_PER_DOC * len(docs)
    if mode == "logprob":
        return ChatRequest(messages=detector_messages(example, docs, prompts=prompts), max_tokens=budget, temperature=0.0, seed=seed, stop=("}",), prefix=DETECTOR_PREFIX)
    return ChatRequest(messages=detector_messages(example, docs, cot=cot, prompts=prompts), max_tokens=budget, temperature=temperature, seed=seed)


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
    if not reasoning:
        reasoning = _steps_regex(text or "")
    if confidence is None:
        c = _CONFIDENCE.search(text or "")
        confidence = _confidence(c.group(1)) if c else None
    if mapping is None:
        reason = "empty" if not (text or "").strip() else "no_score"
        return DocAdjustments(tuple(ParsedScore(math.nan, failure=reason) for _ in range(m)), reasoning=reasoning, confidence=confidence)
    lo, hi = RANGE[CONFLICT]
    values = []
    for n in range(1, m + 1):
        if n not in mapping:
            values.append(ParsedScore(math.nan, failure="missing_id"))
            continue
        raw = _as_number(mapping[n])
        if raw is None:
            values.append(ParsedScore(math.nan, failure="not_numeric"))
        elif not (math.isfinite(raw) and lo <= raw <= hi):
            values.append(ParsedScore(math.nan, raw_value=raw, failure="out_of_range", method="per_query"))
        else:
            values.append(ParsedScore(conflict_to_score(raw), raw_value=raw, method="per_query"))
    return DocAdjustments(
        tuple(values),
        missing_ids=sum(1 for v in values if v.failure == "missing_id"),
        extra_ids=sum(1 for n in mapping if not 1 <= n <= m),
        reasoning=reasoning,
        confidence=confidence,
    )


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
    return _read(completion, agent, mode)[0]


def rescore_request(normal: ChatRequest, steps: Sequence[str], *, mode: str, max_tokens: int, confidence: int | None = None) -> ChatRequest | ScoreRequest:
    """The RSC probe's re-scoring request under ``rsc.rescore=prefix`` (Appendix F.1:
    the perturbed chain "is presented as-is to the scoring prompt"; the default reading
    is :func:`forced_rescore_request`).

    The request is the ``normal`` CoT scoring request itself -- same system prompt,
    same user turn, same sampling -- with the assistant turn already begun with the
    perturbed chain, written where the model wrote its own: ``{"reasoning_steps":
    [...steps...], "confidence": ``. Only the score that follows is read, so the
    perturbation is the one thing that differs from the normal score's request.

    ``mode="generate"``: the model continues (confidence, then the score) and stops
    at the closing brace; read the reply with :func:`read_rescore`.
    ``mode="logprob"``: the prefix runs on to ``"score": `` -- the confidence the model
    gave with its own chain is kept (omitted when it gave none) -- and the expected
    digit is read from the next-token distribution.
    """
    chain = json.dumps([str(s) for s in steps], ensure_ascii=False)
    head = '{"reasoning_steps": ' + chain + ", "
    if mode == "generate":
        return ChatRequest(
            messages=normal.messages, max_tokens=max_tokens, temperature=normal.temperature, top_p=normal.top_p,
            seed=normal.seed, stop=SCORE_STOP, prefix=head + '"confidence": ',
        )
    if mode == "logprob":
        conf = "" if confidence is None else f'"confidence": {int(confidence)}, '
        return ScoreRequest(messages=normal.messages, candidates=DIGITS, prefix=head + conf + '"score": ')
    raise ValueError(f"unknown rescoring mode '{mode}'; valid: {', '.join(SCORING_MODES)}")


def forced_rescore_request(
    example: Example, doc: Doc, steps: Sequence[str], *, mode: str, max_tokens: int, temperature: float, seed: int,
    prompts: PromptSet | None = None,
) -> ChatRequest | ScoreRequest:
    """The RSC probe's re-score under ``rsc.rescore=forced`` (the authors' reading of
    F.1): a request of its own (:func:`madara_cli.agents.prompts.forced_rescore_messages`)
    whose user turn carries the perturbed chain as a delimited previous analysis; no
    assistant prefix. The reply is ``{"score": N, "confidence": C}``.

    ``mode="generate"``: sampled like the normal CoT request (its temperature and seed),
    stopped at the closing brace, read with :func:`parse_completion`.
    ``mode="logprob"``: the expected digit after ``{"score": `` -- the score is the
    reply's first field, so nothing of the chain or the confidence is in the prefix.
    """
    msgs = forced_rescore_messages(example, doc, steps, prompts=prompts)
    if mode == "generate":
        return ChatRequest(messages=msgs, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=SCORE_STOP)
    if mode == "logprob":
        return ScoreRequest(messages=msgs, candidates=DIGITS, prefix=LOGPROB_PREFIX)
    raise ValueError(f"unknown rescoring mode '{mode}'; valid: {', '.join(SCORING_MODES)}")


def read_rescore(completion: Completion, agent: str = "relevance") -> ParsedScore:
    """The score of a generated re-score reply: only the continuation is read (the chain
    in the prefix may itself mention scores), as the rest of a ``{"confidence": ...``
    object."""
    text = '{"confidence": ' + completion.text
    if completion.finish_reason == "stop" and text.count("{") > text.count("}"):
        text += "}"
    parsed = parse_score(text, agent)
    return ParsedScore(parsed.value, parsed.raw_value, parsed.failure, parsed.method, (), parsed.confidence)


def _read(completion: Completion, agent: str, mode: str, parser: str = "madara") -> tuple[ParsedScore, str]:
    if mode == "logprob":
        lp = completion.logprobs or {}
        value = expected_score(lp, DIGITS)
        raw = json.dumps({c: (None if not math.isfinite(v) else round(v, 4)) for c, v in lp.items()})
        if math.isnan(value):
            return ParsedScore(math.nan, failure="no_mass"), raw
        return ParsedScore(value, raw_value=value, method="logprob"), raw
    text = completion.text
    if completion.finish_reason == "stop" and text.count("{") > text.count("}"):
        text += "}"
    return (parse_score_authors(text) if parser == "authors" else parse_score(text, agent)), text


def build_matrix(
    example: Example, completions: Sequence[Completion], mode: str, conflict_reply: Completion | None = None, parsers: Sequence[str] | None = None
) -> ScoreMatrix:
    """Assemble one example's matrix from its document-major completions: over all
    three agents, or -- with ``conflict_reply``, the per-query detector's one reply --
    over the first two, the detector's column read from that reply. ``parsers`` names
    each agent's reader (``madara`` or ``authors``; all ``madara`` by default)."""
    docs = example.docs or ()
    m, a = len(docs), len(AGENTS)
    per_doc = a if conflict_reply is None else a - 1
    scores = np.full((m, a), math.nan)
    reasons: list[list[str | None]] = [[None] * a for _ in range(m)]
    raw: list[list[str]] = [[""] * a for _ in range(m)]
    reasoning: list[list[tuple[str, ...]]] = [[()] * a for _ in range(m)]
    confidence: list[list[int | None]] = [[None] * a for _ in range(m)]
    cut = 0
    for n, c in enumerate(completions):
        i, j = divmod(n, per_doc)
        parsed, raw[i][j] = _read(c, AGENTS[j], mode, parsers[j] if parsers else "madara")
        scores[i, j] = parsed.value
        reasons[i][j] = parsed.failure
        reasoning[i][j] = parsed.reasoning
        confidence[i][j] = parsed.confidence
        cut += int(c.finish_reason == "length")
    missing = extra = 0
    if conflict_reply is not None:
        adj, text = read_conflict_reply(conflict_reply, m, mode)
        j = AGENTS.index(CONFLICT)
        for i, parsed in enumerate(adj.values):
            scores[i, j] = parsed.value
            reasons[i][j] = parsed.failure
            raw[i][j] = text  # the one reply all the documents' adjustments come from
            reasoning[i][j] = adj.reasoning
            confidence[i][j] = adj.confidence
        missing, extra = adj.missing_ids, adj.extra_ids
        cut += int(conflict_reply.finish_reason == "length")
    return ScoreMatrix(
        example_id=example.id,
        doc_ids=tuple(d.id for d in docs),
        agents=AGENTS,
        scores=scores,
        failed=np.array([[r is not None for r in row] for row in reasons], dtype=bool).reshape(m, a),
        failure_reasons=tuple(tuple(r) for r in reasons),
        raw=tuple(tuple(r) for r in raw),
        reasoning=tuple(tuple(r) for r in reasoning),
        confidence=tuple(tuple(r) for r in confidence),
        hit_max_tokens=cut,
        conflict_calls="per_document" if conflict_reply is None else "per_query",
        missing_ids=missing,
        extra_ids=extra,
    )


def reading_parsers(reading: Any) -> tuple[str, ...]:
    """Each agent's reader under ``reading`` (a ``reading`` config node): the authors'
    parser for every agent with ``score_parser=authors``, and for the Conflict Detector
    with ``conflict=score_field`` (its reply read as a score, as their code does)."""
    reading = reading or {}
    base = str(reading.get("score_parser", "madara"))
    detector = "authors" if str(reading.get("conflict", "adjustment")) == "score_field" else base
    return tuple(detector if a == CONFLICT else base for a in AGENTS)


def _check_conflict(conflict: str) -> None:
    from madara_cli.errors import ConfigError

    if conflict not in CONFLICT_CALLS:
        raise ConfigError(f"unknown strategy.conflict '{conflict}'; valid: {', '.join(CONFLICT_CALLS)}")


def assess(ctx: Any, examples: Sequence[Example], cot: bool | None = None, mode: str | None = None, conflict: str | None = None) -> list[ScoreMatrix]:
    """Score every document of every example with the three agents: ONE batched call
    per stage (with ``conflict="per_query"`` a second one, the detector's, one request
    per example).

    ``ctx`` is a :class:`~madara_cli.strategies.context.StrategyContext`; ``cot``,
    ``mode`` and ``conflict`` default to ``ctx.strategy.cot``, ``ctx.strategy.scoring``
    and ``ctx.strategy.conflict`` (``per_query`` where a strategy config has none).
    """
    cot = bool(ctx.strategy.cot) if cot is None else cot
    mode = str(ctx.strategy.scoring) if mode is None else mode
    conflict = str(ctx.strategy.get("conflict", "per_query")) if conflict is None else conflict
    _check_conflict(conflict)
    reading = ctx.cfg.get("reading") or {}
    parsers = reading_parsers(reading)
    if str(reading.get("conflict", "adjustment")) == "score_field":
        conflict = "per_document"  # the authors' detector is asked about each document, like the other two
    stop = None if str(reading.get("requests", "madara")) == "madara" else ()
    gen = ctx.cfg.generation
    max_tokens = int(gen.cot_max_tokens if cot else gen.score_max_tokens)
    agents = AGENTS if conflict == "per_document" else tuple(x for x in AGENTS if x != CONFLICT)
    prompts = ctx.prompts
    per_example = [
        score_requests(ex, cot=cot, mode=mode, max_tokens=max_tokens, temperature=ctx.temperature, seed=ctx.seed, agents=agents, prompts=prompts, stop=stop)
        for ex in examples
    ]
    # Sent agent-major (every relevance request of the cell, then every consistency
    # request, ...): consecutive prompts then share the agent's system prompt, which a
    # sequential engine (llama.cpp) reuses from its KV cache. vLLM's prefix cache does
    # not care about order. The cache key of a request does not depend on its position.
    a = len(agents)
    order = [(e, n) for j in range(a) for e, reqs in enumerate(per_example) for n in range(j, len(reqs), a)]
    flat = [per_example[e][n] for e, n in order]
    stage = stage_name(cot, mode)
    if mode == "logprob":
        outs = ctx.llm.logprobs(stage, flat) if flat else []
    else:
        outs = ctx.llm.chat(stage, flat) if flat else []
    back: list[list[Completion | None]] = [[None] * len(reqs) for reqs in per_example]
    for (e, n), c in zip(order, outs):
        back[e][n] = c
    if conflict == "per_document":
        return [build_matrix(ex, comps, mode, parsers=parsers) for ex, comps in zip(examples, back)]
    detector = [
        conflict_request(ex, ex.docs or (), cot=cot, mode=mode, max_tokens=max_tokens, temperature=ctx.temperature, seed=ctx.seed, prompts=prompts)
        for ex in examples
    ]
    # Examples without documents have nothing to adjust and ask nothing.
    asked = [e for e, ex in enumerate(examples) if ex.docs]
    replies = ctx.llm.chat(conflict_stage_name(cot, mode), [detector[e] for e in asked]) if asked else []
    reply_of: dict[int, Completion] = dict(zip(asked, replies))
    return [
        build_matrix(ex, comps, mode, reply_of.get(e, Completion(text="")), parsers=parsers)
        for e, (ex, comps) in enumerate(zip(examples, back))
    ]


# --------------------------------------------------------------------------- #
# Cell report: failures and polarization (Section 4.1: 80.8% -> 3.5% extremes)
# --------------------------------------------------------------------------- #


def _stats(values: np.ndarray, failed: np.ndarray) -> dict[str, Any]:
    n = int(failed.size)
    valid = values[~failed]
    extreme = np.isclose(valid, 0.0) | np.isclose(valid, 5.0)
    return {
        "n_scores": n,
        "n_valid": int(valid.size),
        "parse_failure_rate": float(failed.sum()) / n if n else 0.0,
        "extreme_score_rate": float(extreme.mean()) if valid.size else None,
        "mean_score": float(valid.mean()) if valid.size else None,
    }


def assessment_report(mats: Sequence[ScoreMatrix], cot: bool = False, mode: str = "generate") -> dict[str, Any]:
    """Per-cell assessment statistics for ``metrics.json``.

    ``parse_failure_rate``: failed / requested scores. ``extreme_score_rate``: share
    of valid scores equal to 0 or 5 on the matrix scale (the paper's polarization;
    a Conflict Detector adjustment of -2/+2 counts, as it maps to 0/5).
    ``mean_score``: mean valid score. The same per agent under ``by_agent``, failure
    reasons under ``failures``; under ``conflict`` how the detector was asked
    (``calls``), the agent replies read and, per query, the document numbers its
    replies left out (``missing_ids``, also failures) or that name no document. JSON-safe (``None`` where undefined, never NaN).
    """
    agents = mats[0].agents if mats else AGENTS
    if mats:
        values = np.concatenate([m.scores for m in mats if m.m] or [np.empty((0, len(agents)))])
        failed = np.concatenate([m.failed for m in mats if m.m] or [np.empty((0, len(agents)), dtype=bool)])
    else:
        values, failed = np.empty((0, len(agents))), np.empty((0, len(agents)), dtype=bool)
    report: dict[str, Any] = {"mode": mode, "cot": bool(cot), **_stats(values, failed)}
    reasons: dict[str, int] = {}
    for m in mats:
        for row in m.failure_reasons:
            for r in row:
                if r is not None:
                    reasons[r] = reasons.get(r, 0) + 1
    report["failures"] = dict(sorted(reasons.items()))
    report["by_agent"] = {a: _stats(values[:, j], failed[:, j]) for j, a in enumerate(agents)}
    # Replies, not scores: a per-query detector reply carries the whole column.
    replies = sum(m.m * len(agents) if m.conflict_calls == "per_document" else m.m * (len(agents) - 1) + int(m.m > 0) for m in mats)
    if mode == "generate":
        report["hit_max_tokens_rate"] = sum(m.hit_max_tokens for m in mats) / replies if replies else 0.0
    calls = sorted({m.conflict_calls for m in mats}) or ["per_document"]
    report["conflict"] = {"calls": calls[0] if len(calls) == 1 else calls, "replies": replies,
                          "missing_ids": sum(m.missing_ids for m in mats), "extra_ids": sum(m.extra_ids for m in mats)}
    if cot:
        with_steps = sum(1 for m in mats for row in m.reasoning for steps in row if steps)
        report["reasoning_rate"] = with_steps / failed.size if failed.size else 0.0
    return report
