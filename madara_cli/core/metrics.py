"""Answer metrics against every gold alias, both sides first cleaned alike by :func:`tidy_answer`
(first non-empty line, no ``Answer:`` lead-in, no wrapping quotes, brackets or emphasis, no
final period; idempotent). :func:`madara_cli.agents.generator.clean_answer` applies it to every
reply; applied to the gold too, it can never turn a verbatim-correct answer ("Washington, D.C.") wrong.

* ``em`` -- the authors' EM (js-lee-AI/MADARA ``madara/metrics.py``, "Section 5.4's"): SQuAD
  normalisation (lower-case, drop ASCII punctuation, then a/an/the, collapse whitespace); the
  paper tables use it.
* ``em_strict`` -- Section 5.4's literal text ("strictly matched after whitespace
  normalization and lowercasing").
* ``f1`` -- token F1, max over aliases, on SQuAD tokens (the paper says only "harmonic mean of
  token precision and recall"; the authors' code uses SQuAD's tokens).
* ``contains`` -- a gold alias appears as whole SQuAD-normalised tokens in the answer.

``METRIC_VERSION`` is in every cell's key: a changed definition makes new cells, never mixed numbers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize(text: str, strict: bool = False) -> str:
    """Lower-case, collapse whitespace; unless ``strict``, drop punctuation, then articles (the
    authors' ``normalize_answer`` order: "the." loses its period, then its article)."""
    text = text.lower()
    if not strict:
        text = "".join(ch for ch in text if ch not in _PUNCT)
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


# 3: em is the authors' EM (SQuAD normalisation), em_strict the literal Section 5.4
#    text; both sides of every comparison go through tidy_answer.
# 2: em was the strict match and em_squad the SQuAD one. 1: em was the SQuAD one.
METRIC_VERSION = 3

METRICS: tuple[str, ...] = ("em", "em_strict", "f1", "contains")
METRIC_ALIASES: dict[str, str] = {"em_squad": "em"}  # names results before METRIC_VERSION 3 used


def metric_name(name: str) -> str:
    """The metric ``name`` means (an alias resolved); ValueError naming the valid ones."""
    name = METRIC_ALIASES.get(name, name)
    if name not in METRICS:
        raise ValueError(f"unknown metric '{name}'; valid: {', '.join(METRICS)}")
    return name


# A lead-in before the answer: "Answer - X" needs spaced dashes ("Answer-ready" keeps its hyphen); no bare "A:" rule ("A-ha" became "ha").
_LEAD_IN = re.compile(
    r"^\s*(?:(?:(?:final\s+)?answer|label)(?:\s*:|\s+-\s)|the\s+(?:final\s+)?answer\s+is(?=[\s:]|$):?)\s*",
    re.IGNORECASE,
)
_CLOSERS = {"(": ")", "[": "]", "{": "}", "“": "”", "‘": "’", "«": "»"}
_SYMMETRIC = set("\"'`*_")


def _unwrap(text: str) -> str:
    """``text`` less one pair of marks around all of it: brackets only when the opener closes at
    the very end ("(a) and (b)", "Paris (France)" stay); quotes and emphasis when the same mark opens and closes."""
    if len(text) < 2:
        return text
    first, last = text[0], text[-1]
    if first in _SYMMETRIC:
        return text[1:-1] if last == first else text
    closer = _CLOSERS.get(first)
    if closer is None or last != closer:
        return text
    depth = 0
    for i, ch in enumerate(text):
        if ch == first:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return text[1:-1] if i == len(text) - 1 else text
    return text


def tidy_answer(text: str) -> str:
    """The clean-up of replies and gold aliases: drop a leading ``Answer:`` / ``Final answer:`` /
    ``The answer is`` / ``Label:`` (the answer maybe on the next line), keep the first non-empty
    line, then strip whitespace, one more lead-in, one wrapping pair (:func:`_unwrap`) and final
    periods until nothing changes (so it is idempotent)."""
    text = _LEAD_IN.sub("", text, count=1)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    ans = lines[0] if lines else ""
    previous = None
    while ans != previous:
        previous = ans
        ans = _LEAD_IN.sub("", ans.strip(), count=1)
        ans = _unwrap(ans.strip()).rstrip(".").strip()
    return ans


def _prepare(text: str, tidy: bool) -> str:
    # tidy=False is reading.answers=strip: the authors' metrics see the text as it is
    return tidy_answer(text) if tidy else text


def exact_match(prediction: str, answers: Iterable[str], strict: bool = False, tidy: bool = True) -> bool:
    """EM against any alias (none: no match) after :func:`tidy_answer` (unless ``tidy=False``):
    SQuAD normalisation, or with ``strict=True`` Section 5.4's (lower-case + whitespace)."""
    p = normalize(_prepare(prediction, tidy), strict=strict)
    return any(p == normalize(_prepare(a, tidy), strict=strict) for a in answers)


def contains_match(prediction: str, answers: Iterable[str], tidy: bool = True) -> bool:
    """A gold alias appears as whole tokens in the normalised prediction (MAIN-RAG's lenient 'accuracy')."""
    p = f" {normalize(_prepare(prediction, tidy))} "
    return any(n and f" {n} " in p for n in (normalize(_prepare(a, tidy)) for a in answers))


def token_f1(prediction: str, answers: Iterable[str], tidy: bool = True) -> float:
    """Max over aliases of the harmonic mean of token precision and recall (SQuAD F1)."""
    pred = normalize(_prepare(prediction, tidy)).split()
    best = 0.0
    for a in answers:
        gold = normalize(_prepare(a, tidy)).split()
        common = Counter(pred) & Counter(gold)
        overlap = sum(common.values())
        if not pred or not gold:
            best = max(best, float(pred == gold))
            continue
        if overlap == 0:
            continue
        precision, recall = overlap / len(pred), overlap / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


@dataclass(frozen=True)
class Scores:
    em: float
    em_strict: float
    f1: float
    contains: float


def score(prediction: str, answers: Sequence[str], tidy: bool = True) -> Scores:
    """Every metric of one answer; ``tidy=False`` (``reading.answers=strip``) compares the text as it is, as the authors' do."""
    return Scores(
        em=float(exact_match(prediction, answers, tidy=tidy)),
        em_strict=float(exact_match(prediction, answers, strict=True, tidy=tidy)),
        f1=token_f1(prediction, answers, tidy=tidy),
        contains=float(contains_match(prediction, answers, tidy=tidy)),
    )


def aggregate(per_example: Sequence[Scores]) -> dict[str, float]:
    """Means over examples, as fractions in [0, 1]."""
    n = len(per_example)
    out: dict[str, float] = {"n": n}
    for name in METRICS:
        out[name] = sum(getattr(s, name) for s in per_example) / n if n else 0.0
    return out
