"""Answer metrics: exact match, token F1 and contains-match against every gold alias.

Normalisation follows the paper (Section 5.4: whitespace normalisation and
lower-casing) extended with the SQuAD convention of stripping punctuation and the
articles a/an/the, which every open-domain QA evaluation since DPR uses; the
``strict`` flag keeps the paper's minimal version for comparison.
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


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    p = normalize(prediction)
    return any(p == normalize(a) for a in answers)


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
    f1: float
    contains: float


def score(prediction: str, answers: Sequence[str]) -> Scores:
    return Scores(
        em=float(exact_match(prediction, answers)),
        f1=token_f1(prediction, answers),
        contains=float(contains_match(prediction, answers)),
    )


def aggregate(per_example: Sequence[Scores]) -> dict[str, float]:
    """Means over examples, as fractions in [0, 1]."""
    n = len(per_example)
    if n == 0:
        return {"n": 0, "em": 0.0, "f1": 0.0, "contains": 0.0}
    return {
        "n": n,
        "em": sum(s.em for s in per_example) / n,
        "f1": sum(s.f1 for s in per_example) / n,
        "contains": sum(s.contains for s in per_example) / n,
    }
