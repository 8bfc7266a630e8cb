"""Document selection and answer voting: small pure functions over score matrices.

Every function takes numpy arrays in retrieval order (row i = the i-th retrieved
document; column j = agent j) and returns indices into that order. Ties are always
broken by retrieval rank (a stable sort), so every selection is deterministic (SDA's
per-agent ranks of tied scores are a setting, ``strategy.rank_ties``).
Score matrices may hold NaN (a failed agent reply); the functions that need
complete matrices impute first (:func:`madara_cli.agents.matrix.impute`: the
example's mean for that agent, or 2.5).

Sources: the MADARA paper -- Section 5.3 (weighted aggregation 0.4/0.3/0.3),
Appendix B (Algorithm 1, SDA; ATF), Appendix C (RRF, k = 60), Section 4.4 (PDE
voting); MAIN-RAG (Chang et al., ACL 2025) for the adaptive judge threshold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

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


def _matrix(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, dtype=float)
    return s[:, None] if s.ndim == 1 else s


def top_k(values: Sequence[float] | np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` largest values, descending; ties keep retrieval order."""
    v = np.asarray(values, dtype=float)
    return [int(i) for i in np.argsort(-v, kind="stable")[: max(int(k), 0)]]


def weighted_aggregate(scores: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """The 3-Agent aggregate ``sum_j w_j * S[:, j]`` on the 0-5 scale, after imputing
    failed scores; weights are normalised to sum 1 (paper: 0.4/0.3/0.3)."""
    s = impute(_matrix(scores))
    return s @ _weights(weights, s.shape[1])


RANK_TIES = ("ordinal", "average")  # strategy.rank_ties


def percentile_ranks(values: Sequence[float] | np.ndarray, ties: str = "ordinal") -> np.ndarray:
    """``rank(s) / (m - 1)`` in [0, 1], 0-based ascending ranks (the lowest score gets
    0, the highest 1). A single document gets 1.

    ``ties="ordinal"``: tied scores get distinct ranks in order of appearance, so of
    two equal scores the later-retrieved document ranks higher -- the authors'
    ``argsort(argsort(s))`` read with a stable sort (numpy's default sort leaves the
    order of ties unspecified). ``ties="average"``: tied scores share their mean rank.
    """
    if ties not in RANK_TIES:
        raise ValueError(f"unknown rank_ties '{ties}'; valid: {', '.join(RANK_TIES)}")
    v = np.asarray(values, dtype=float)
    m = v.size
    if m == 1:
        return np.ones(1)
    return (rankdata(v, method=ties) - 1.0) / (m - 1)


def sda_rank(scores: np.ndarray, weights: Sequence[float] | None = None, ties: str = "ordinal") -> np.ndarray:
    """Score Distribution Alignment (Algorithm 1): each agent's scores become
    percentile ranks (ties ranked as ``ties`` says, see :func:`percentile_ranks`),
    which are averaged with ``weights`` (default uniform) and mapped to [0, 5].
    Select with :func:`top_k`."""
    s = impute(_matrix(scores))
    if s.shape[0] == 0:
        return np.zeros(0)
    r = np.column_stack([percentile_ranks(s[:, j], ties) for j in range(s.shape[1])])
    return (r @ _weights(weights, s.shape[1])) * 5.0


def rrf_fuse(scores: np.ndarray, k: int = 60, weights: Sequence[float] | None = None) -> np.ndarray:
    """Reciprocal Rank Fusion (Appendix C): ``sum_j 1 / (k + rank_j(d))`` with
    ``rank_j`` the 1-based rank of d under agent j (highest score = 1; tied scores
    share their average rank). With ``weights`` each term is scaled by
    ``A * w_j`` (uniform weights give the paper's unweighted sum exactly)."""
    s = impute(_matrix(scores))
    if s.shape[0] == 0:
        return np.zeros(0)
    a = s.shape[1]
    w = _weights(weights, a) * a
    ranks = np.column_stack([rankdata(-s[:, j], method="average") for j in range(a)])
    return (w / (k + ranks)).sum(axis=1)


def atf_select(aggregate: Sequence[float] | np.ndarray, kappa: float = 0.5, min_keep: int = 2, max_keep: int = 5) -> list[int]:
    """Adaptive Threshold Filtering (Section 4.3, Eq. 3): keep documents with
    ``s >= mu - kappa * sigma`` (population sigma over the example's documents),
    descending, at least ``min_keep`` and at most ``max_keep`` of them."""
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
    """MAIN-RAG's adaptive filter: keep documents whose judge score
    ``log P(Yes) - log P(No)`` is at least ``mean - n * sigma`` (population sigma
    over the example's documents), in descending order. Documents without a score
    (NaN) are never kept, unless none has one: then all are kept in retrieval order."""
    s = np.asarray(judge_scores, dtype=float)
    finite = np.isfinite(s)
    if not finite.any():
        return list(range(s.size))
    tau = s[finite].mean() - n * s[finite].std()
    return [i for i in top_k(np.where(finite, s, -np.inf), s.size) if finite[i] and s[i] >= tau - _EPS]


@dataclass(frozen=True)
class Vote:
    """The outcome of voting over per-document (or per-sample) answers.

    ``winner`` indexes the answer returned (the highest-ranked member of the winning
    group); ``totals``/``sizes`` are keyed by normalised answer."""

    winner: int | None
    answer: str
    totals: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def pde_vote(answers: Sequence[str], weights: Sequence[float] | None = None) -> Vote:
    """Score-weighted majority vote over answers in rank order (Section 4.4).

    Answers are grouped by :func:`madara_cli.core.metrics.normalize`; a group's total is
    the sum of its members' weights (uniform when ``weights`` is None). Empty
    answers do not vote. The winner is the group with the largest total; ties go to
    the larger group, then to the group holding the highest-ranked answer (the
    earliest in ``answers``). The returned answer is that group's highest-ranked
    member as written. With no non-empty answer, the first answer (or "") is returned.
    """
    w = [1.0] * len(answers) if weights is None else [float(x) for x in weights]
    if len(w) != len(answers):
        raise ValueError(f"{len(w)} weights for {len(answers)} answers")
    totals: dict[str, float] = {}
    sizes: dict[str, int] = {}
    first: dict[str, int] = {}
    for pos, (a, weight) in enumerate(zip(answers, w)):
        key = normalize(a)
        if not key:
            continue
        totals[key] = totals.get(key, 0.0) + weight
        sizes[key] = sizes.get(key, 0) + 1
        first.setdefault(key, pos)
    if not totals:
        return Vote(winner=0 if answers else None, answer=answers[0] if answers else "")
    best_total = max(totals.values())
    contenders = [k for k, t in totals.items() if t >= best_total - _EPS]
    best = min(contenders, key=lambda k: (-sizes[k], first[k]))
    return Vote(winner=first[best], answer=answers[first[best]], totals=totals, sizes=sizes)


def authors_group_key(text: str) -> str:
    """The authors' grouping key for PDE answers: lower-case, every non-word,
    non-space character dropped, whitespace collapsed. Articles stay ("the beatles"
    and "beatles" are two groups); an empty answer is a group of its own."""
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def pde_vote_authors(answers: Sequence[str], weights: Sequence[float] | None = None) -> Vote:
    """PDE's vote as the authors' code casts it (``reading.pde_grouping=authors``).

    Groups by :func:`authors_group_key`; a group's total is the sum of its weights,
    an empty answer's group included (it can win). The winner is the first group
    formed among those with the largest total (exact ties go to insertion order, no
    tolerance, no size rule), and the answer returned is the group's LAST member as
    written (each member overwrites the group's answer)."""
    w = [1.0] * len(answers) if weights is None else [float(x) for x in weights]
    if len(w) != len(answers):
        raise ValueError(f"{len(w)} weights for {len(answers)} answers")
    totals: dict[str, float] = {}
    sizes: dict[str, int] = {}
    last: dict[str, int] = {}
    for pos, (a, weight) in enumerate(zip(answers, w)):
        key = authors_group_key(a)
        totals[key] = totals.get(key, 0.0) + weight
        sizes[key] = sizes.get(key, 0) + 1
        last[key] = pos
    if not totals:
        return Vote(winner=None, answer="")
    best_total = max(totals.values())
    best = next(k for k, t in totals.items() if t == best_total)
    return Vote(winner=last[best], answer=answers[last[best]], totals=totals, sizes=sizes)
