"""Answer metrics: exact match, token F1 and contains-match against every gold alias.

Every metric compares the *cleaned* answer (:func:`madara_cli.agents.generator.clean_answer`:
first line, no ``Answer:`` lead-in, no wrapping quotes or final period) with each gold
alias:

* ``em`` -- the paper's EM (Section 5.4: "strictly matched after whitespace
  normalization and lowercasing"): lower-case, collapse whitespace, compare. The paper
  tables use it.
* ``em_squad`` -- EM after the SQuAD normalisation (also drop punctuation and the
  articles a/an/the), the convention of most open-domain QA papers since DPR.
* ``f1`` -- token F1 (max over aliases) on SQuAD-normalised tokens; the paper defines
  F1 only as the harmonic mean of token precision and recall, and SQuAD's tokens are
  the standard reading.
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
    """Lower-case, collapse whitespace; unless ``strict``, also drop punctuation and articles."""
    text = text.lower()
    if not strict:
        text = "".join(ch for ch in text if ch not in _PUNCT)
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


METRIC_VERSION = 2  # 2: em is the paper's strict EM; em_squad added

METRICS: tuple[str, ...] = ("em", "em_squad", "f1", "contains")


def exact_match(prediction: str, answers: Iterable[str], squad: bool = False) -> bool:
    """The paper's EM (lower-case + whitespace); ``squad=True`` also strips punctuation
    and articles."""
    p = normalize(prediction, strict=not squad)
    return any(p == normalize(a, strict=not squad) for a in answers)


def contains_match(prediction: str, answers: Iterable[str]) -> bool:
    """A gold alias appears, as whole tokens, inside the normalised prediction
    (the lenient 'accuracy' used by MAIN-RAG and many open-domain QA papers)."""
    p = f" {normalize(prediction)} "
    return any(n and f" {n} " in p for n in (normalize(a) for a in answers))


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """Max over aliases of the harmonic mean of token precision and recall (SQuAD F1)."""
    pred = normalize(prediction).split()
    best = 0.0
    for a in answers:
        gold = normalize(a).split()
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
    em_squad: float
    f1: float
    contains: float


def score(prediction: str, answers: Sequence[str]) -> Scores:
    return Scores(
        em=float(exact_match(prediction, answers)),
        em_squad=float(exact_match(prediction, answers, squad=True)),
        f1=token_f1(prediction, answers),
        contains=float(contains_match(prediction, answers)),
    )


def aggregate(per_example: Sequence[Scores]) -> dict[str, float]:
    """Means over examples, as fractions in [0, 1]."""
    n = len(per_example)
    out: dict[str, float] = {"n": n}
    for name in METRICS:
        out[name] = sum(getattr(s, name) for s in per_example) / n if n else 0.0
    return out
