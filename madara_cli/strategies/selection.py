"""Document selection and answer voting: small pure functions over score matrices in
retrieval order (row i = the i-th retrieved document, column j = agent j), returning
indices into that order. Ties break by retrieval rank (a stable sort), so every selection
is deterministic. Failed scores (NaN) are imputed first where a function needs a complete
matrix (:func:`madara_cli.agents.matrix.impute`).

Sources: the MADARA paper -- Section 5.3 (weighted aggregation), Appendix B (Algorithm 1,
SDA; ATF), Appendix C (RRF, k = 60), Section 4.4 (PDE voting); MAIN-RAG (Chang et al.,
ACL 2025) for the adaptive judge threshold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.stats import rankdata

from madara_cli.agents.matrix import impute
from madara_cli.core.metrics import normalize

_EPS = 1e-9  # float tolerance for thresholds and vote ties


def _weights(weights: Sequence[float] | None, n_agents: int) -> np.ndarray:
    """Agent weights normalised to sum 1 (``None`` = uniform)."""
    if weights is None:
        return np.full(n_agents, 1.0 / n_agents)
    w = np.asarray(list(weights), dtype=float)
    if w.shape != (n_agents,):
        raise ValueError(f"{len(w)} weights for {n_agents} agents")
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be non-negative and not all zero, got {list(weights)}")
    return w / w.sum()


def top_k(values: Sequence[float] | np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` largest values, descending; ties keep retrieval order."""
    v = np.asarray(values, dtype=float)
    return [int(i) for i in np.argsort(-v, kind="stable")[: max(int(k), 0)]]


def weighted_aggregate(scores: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """The 3-Agent aggregate ``sum_j w_j * S[:, j]`` on the 0-5 scale, after imputing
    failed scores; weights are normalised to sum 1 (paper: 0.4/0.3/0.3)."""
    s = impute(scores)
    return s @ _weights(weights, s.shape[1])


RANK_TIES = ("ordinal", "average")  # strategy.rank_ties


def percentile_ranks(values: Sequence[float] | np.ndarray, ties: str = "ordinal") -> np.ndarray:
    """``rank(s) / (m - 1)`` in [0, 1] with 0-based ascending ranks; a single document gets 1.
    ``ties="ordinal"``: tied scores get distinct ranks in order of appearance (of two equal
    scores the later-retrieved ranks higher) -- the authors' ``argsort(argsort(s))`` read
    with a stable sort, since numpy's default leaves ties unspecified. ``ties="average"``:
    tied scores share their mean rank."""
    if ties not in RANK_TIES:
        raise ValueError(f"unknown rank_ties '{ties}'; valid: {', '.join(RANK_TIES)}")
    v = np.asarray(values, dtype=float)
    m = v.size
    if m == 1:
        return np.ones(1)
    return (rankdata(v, method=ties) - 1.0) / (m - 1)


def sda_rank(scores: np.ndarray, weights: Sequence[float] | None = None, ties: str = "ordinal") -> np.ndarray:
    """Score Distribution Alignment (Algorithm 1): each agent's scores as percentile ranks
    (:func:`percentile_ranks`), averaged with ``weights`` (default uniform), times 5."""
    s = impute(scores)
    if s.shape[0] == 0:
        return np.zeros(0)
    r = np.column_stack([percentile_ranks(s[:, j], ties) for j in range(s.shape[1])])
    return (r @ _weights(weights, s.shape[1])) * 5.0


def rrf_fuse(scores: np.ndarray, k: int = 60, weights: Sequence[float] | None = None) -> np.ndarray:
    """Reciprocal Rank Fusion (Appendix C): ``sum_j A * w_j / (k + rank_j(d))`` over A agents,
    w normalised, ``rank_j`` 1-based under agent j (highest score 1; ties share their
    average rank); uniform weights give the paper's unweighted sum exactly."""
    s = impute(scores)
    if s.shape[0] == 0:
        return np.zeros(0)
    a = s.shape[1]
    w = _weights(weights, a) * a
    ranks = np.column_stack([rankdata(-s[:, j], method="average") for j in range(a)])
    return (w / (k + ranks)).sum(axis=1)


def atf_select(aggregate: Sequence[float] | np.ndarray, kappa: float = 0.5, min_keep: int = 2, max_keep: int = 5) -> list[int]:
    """Adaptive Threshold Filtering (Section 4.3, Eq. 3): documents with ``s >= mu - kappa *
    sigma`` (:func:`atf_threshold`), descending, at least ``min_keep``, at most ``max_keep``."""
    s = np.asarray(aggregate, dtype=float)
    if s.size == 0:
        return []
    order = top_k(s, s.size)
    tau = atf_threshold(s, kappa)
    kept = [i for i in order if s[i] >= tau - _EPS]
    if len(kept) < min_keep:
        kept = order[:min_keep]
    return kept[:max_keep]


def atf_threshold(aggregate: Sequence[float] | np.ndarray, kappa: float = 0.5) -> float:
    """``mu - kappa * sigma`` with the population sigma (ddof = 0)."""
    s = np.asarray(aggregate, dtype=float)
    return float(s.mean() - kappa * s.std()) if s.size else float("nan")


def main_rag_select(judge_scores: Sequence[float] | np.ndarray, n: float = 0.0) -> list[int]:
    """MAIN-RAG's adaptive filter: documents whose judge score is at least ``mean - n *
    sigma`` (population sigma), descending. A document without a score (NaN) is never
    kept, unless none has one: then all are, in retrieval order."""
    s = np.asarray(judge_scores, dtype=float)
    finite = np.isfinite(s)
    if not finite.any():
        return list(range(s.size))
    tau = s[finite].mean() - n * s[finite].std()
    return [i for i in top_k(np.where(finite, s, -np.inf), s.size) if finite[i] and s[i] >= tau - _EPS]


@dataclass(frozen=True)
class Vote:
    """The outcome of a vote over per-document (or per-sample) answers: ``winner`` indexes
    the answer returned; ``totals``/``sizes`` are keyed by the group key."""

    winner: int | None
    answer: str
    totals: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def _tally(
    answers: Sequence[str], weights: Sequence[float] | None, key_of: Callable[[str], str], empty_votes: bool
) -> tuple[dict[str, float], dict[str, int], dict[str, list[int]]]:
    """Per group key, in order of formation: the total weight (uniform when None), the
    size and the members' positions."""
    w = [1.0] * len(answers) if weights is None else [float(x) for x in weights]
    if len(w) != len(answers):
        raise ValueError(f"{len(w)} weights for {len(answers)} answers")
    totals: dict[str, float] = {}
    members: dict[str, list[int]] = {}
    for pos, (a, weight) in enumerate(zip(answers, w)):
        key = key_of(a)
        if key or empty_votes:
            totals[key] = totals.get(key, 0.0) + weight
            members.setdefault(key, []).append(pos)
    return totals, {k: len(m) for k, m in members.items()}, members


def pde_vote(answers: Sequence[str], weights: Sequence[float] | None = None) -> Vote:
    """Score-weighted majority vote over answers in rank order (Section 4.4): answers grouped
    by :func:`madara_cli.core.metrics.normalize`, a group's total the sum of its weights
    (uniform when None); empty answers do not vote. The largest total wins; ties go to the
    larger group, then to the one holding the highest-ranked answer, whose text as written
    is returned. With no non-empty answer, the first answer (or "")."""
    totals, sizes, members = _tally(answers, weights, normalize, empty_votes=False)
    if not totals:
        return Vote(winner=0 if answers else None, answer=answers[0] if answers else "")
    best_total = max(totals.values())
    best = min((k for k, t in totals.items() if t >= best_total - _EPS), key=lambda k: (-sizes[k], members[k][0]))
    first = members[best][0]
    return Vote(winner=first, answer=answers[first], totals=totals, sizes=sizes)


def authors_group_key(text: str) -> str:
    """The authors' grouping key for PDE answers: lower-case, every non-word,
    non-space character dropped, whitespace collapsed. Articles stay ("the beatles"
    and "beatles" are two groups); an empty answer is a group of its own."""
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def pde_vote_authors(answers: Sequence[str], weights: Sequence[float] | None = None) -> Vote:
    """PDE's vote as the authors' code casts it (``reading.pde_grouping=authors``): groups by
    :func:`authors_group_key`, an empty answer's group included (it can win); the first
    group formed among those with the largest total wins (no tolerance, no size rule), and
    the answer returned is its LAST member as written (each overwrites the group's answer)."""
    totals, sizes, members = _tally(answers, weights, authors_group_key, empty_votes=True)
    if not totals:
        return Vote(winner=None, answer="")
    best_total = max(totals.values())
    last = members[next(k for k, t in totals.items() if t == best_total)][-1]
    return Vote(winner=last, answer=answers[last], totals=totals, sizes=sizes)
