"""Answer metrics: exact match, token F1 and contains-match against every gold alias.

Every metric compares the answer with each gold alias after the same clean-up of
both sides (:func:`tidy_answer`: first non-empty line, no ``Answer:`` lead-in, no
wrapping pair of quotes, brackets or emphasis, no final period). The generator's
:func:`madara_cli.agents.generator.clean_answer` applies it to every reply; applying it
to the gold as well means the clean-up can never turn a verbatim-correct answer
("Washington, D.C.") wrong, and ``tidy_answer`` is idempotent, so cleaning a clean
answer again changes nothing.

* ``em`` -- EM as the authors compute it (js-lee-AI/MADARA ``madara/metrics.py``,
  whose docstring says it is Section 5.4's): lower-case, drop ASCII punctuation, drop
  the articles a/an/the, collapse whitespace (the SQuAD normalisation), compare. The
  paper tables use it.
* ``em_strict`` -- the literal text of Section 5.4 ("strictly matched after
  whitespace normalization and lowercasing"): lower-case, collapse whitespace, compare.
* ``f1`` -- token F1 (max over aliases) on SQuAD-normalised tokens; the paper defines
  F1 only as the harmonic mean of token precision and recall, and the authors' code
  uses SQuAD's tokens.
* ``contains`` -- a gold alias appears as whole SQuAD-normalised tokens in the answer.

``METRIC_VERSION`` is part of every cell's key: a change to any definition here makes
new cells instead of silently mixing old and new numbers.
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
    """Lower-case, collapse whitespace; unless ``strict``, also drop punctuation and
    then the articles (in that order, as the authors' ``normalize_answer`` does: "the."
    loses its period first and then its article)."""
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
# Names results written before METRIC_VERSION 3 used for what is now a metric here.
METRIC_ALIASES: dict[str, str] = {"em_squad": "em"}


def metric_name(name: str) -> str:
    """The metric ``name`` means (an alias resolved); ValueError naming the valid ones."""
    name = METRIC_ALIASES.get(name, name)
    if name not in METRICS:
        raise ValueError(f"unknown metric '{name}'; valid: {', '.join(METRICS)}")
    return name


# A lead-in the reply puts before its answer. "Answer - X" needs spaces around the dash
# so that "Answer-ready" keeps its hyphen; there is no bare "A:" rule, which turned
# "A-ha" into "ha".
_LEAD_IN = re.compile(
    r"^\s*(?:(?:(?:final\s+)?answer|label)(?:\s*:|\s+-\s)|the\s+(?:final\s+)?answer\s+is(?=[\s:]|$):?)\s*",
    re.IGNORECASE,
)
_CLOSERS = {"(": ")", "[": "]", "{": "}", "“": "”", "‘": "’", "«": "»"}
_SYMMETRIC = set("\"'`*_")


def _unwrap(text: str) -> str:
    """``text`` without one pair of marks around all of it: brackets only when the
    opening one closes at the very end ("(a) and (b)" and "Paris (France)" stay as they
    are); quotes and emphasis only when the same mark opens and closes."""
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
    """The answer clean-up applied to replies and gold aliases alike.

    1. drop a leading ``Answer:`` / ``Final answer:`` / ``The answer is`` / ``Label:``
       (also when the answer follows it on the next line);
    2. keep the first non-empty line;
    3. repeatedly strip surrounding whitespace, one more lead-in, one pair of marks
       around the whole answer (:func:`_unwrap`) and final periods, until nothing
       changes -- so ``tidy_answer(tidy_answer(x)) == tidy_answer(x)``.
    """
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
    """EM against any alias after :func:`tidy_answer` of both sides: the authors' SQuAD
    normalisation by default, the literal Section 5.4 reading (lower-case + whitespace)
    with ``strict=True``. No aliases: no match. ``tidy=False``: no clean-up first."""
    p = normalize(_prepare(prediction, tidy), strict=strict)
    return any(p == normalize(_prepare(a, tidy), strict=strict) for a in answers)


def contains_match(prediction: str, answers: Iterable[str], tidy: bool = True) -> bool:
    """A gold alias appears, as whole tokens, inside the normalised prediction
    (the lenient 'accuracy' used by MAIN-RAG and many open-domain QA papers)."""
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
    """Every metric of one answer; ``tidy=False`` (``reading.answers=strip``) compares
    the text as it is, as the authors' metrics do."""
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
