"""Significance tests and resampling used to compare cells and audit the paper.

Every function is small, pure and vectorised; every resampling takes a seed. The
paper's own tests (Appendix G.3, Table 14) are McNemar's test on discordant pairs
with a Holm-Bonferroni correction; Table 6 adds a paired bootstrap over queries;
Appendix H.1 and the RSC probe (Section 3) use Spearman's rank correlation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _sps

MCNEMAR_METHODS = ("exact", "chi2-cc", "chi2")


def mcnemar(b: int, c: int, method: str = "exact") -> float:
    """Two-sided p-value of McNemar's test (McNemar 1947) from the discordant counts.

    ``b`` = pairs where the method is right and the baseline wrong, ``c`` the reverse.

    - ``"exact"``: two-sided binomial test of min(b, c) ~ Binomial(b + c, 1/2)
      (the exact conditional test; ``scipy.stats.binomtest``).
    - ``"chi2-cc"``: X² = (|b − c| − 1)² / (b + c) against χ²(1) (Edwards' continuity
      correction, the textbook default).
    - ``"chi2"``: X² = (b − c)² / (b + c) against χ²(1), uncorrected.

    With no discordant pairs (b + c = 0) the two classifiers never disagree and the
    p-value is 1.0 by convention.
    """
    if method not in MCNEMAR_METHODS:
        raise ValueError(f"unknown McNemar method {method!r}; valid: {', '.join(MCNEMAR_METHODS)}")
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    if method == "exact":
        return float(_sps.binomtest(min(b, c), n=n, p=0.5, alternative="two-sided").pvalue)
    correction = 1.0 if method == "chi2-cc" else 0.0
    statistic = max(abs(b - c) - correction, 0.0) ** 2 / n
    return float(_sps.chi2.sf(statistic, df=1))


def discordant(a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray) -> tuple[int, int]:
    """Discordant-pair counts (b, c) of two paired boolean outcomes.

    b = #(A right and B wrong), c = #(A wrong and B right): the off-diagonal cells of
    McNemar's 2×2 table.
    """
    a = np.asarray(a_correct, dtype=bool)
    bb = np.asarray(b_correct, dtype=bool)
    if a.shape != bb.shape:
        raise ValueError(f"paired outcomes must have the same shape, got {a.shape} and {bb.shape}")
    return int(np.sum(a & ~bb)), int(np.sum(~a & bb))


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values (Holm 1979).

    With p sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)); the
    running maximum keeps the adjusted values monotone. Returned in input order;
    reject H_i at level α iff p̃_i ≤ α.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError("holm expects a one-dimensional sequence of p-values")
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap summary of mean(a − b): point estimate, percentile CI and p."""

    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    n_resamples: int
    seed: int


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Paired (query-level) bootstrap of the mean difference mean(a − b) (Efron & Tibshirani 1993, ch. 13, 16).

    Queries are resampled with replacement ``n_resamples`` times from
    ``numpy.random.default_rng(seed)``; the CI is the percentile interval.

    p-value rule: the share of resampled mean differences that fall on the other side
    of 0 from the observed difference (0 itself counts as the other side), times 2,
    capped at 1 — the two-sided "percentile" bootstrap test. An observed difference of
    exactly 0 gives p = 1.
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired scores must be 1-D and of equal length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("paired_bootstrap needs at least one pair")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    diff = x - y
    n = diff.size
    observed = float(diff.mean())
    rng = np.random.default_rng(seed)
    # Resample in fixed-size chunks so memory stays bounded for large cells; the chunk
    # size is constant, so the result depends only on the seed.
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    if observed > 0:
        p = 2.0 * float(np.mean(means <= 0))
    elif observed < 0:
        p = 2.0 * float(np.mean(means >= 0))
    else:
        p = 1.0
    return BootstrapResult(observed, float(lo), float(hi), min(p, 1.0), n, n_resamples, seed)


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Spearman's rank correlation ρ and its two-sided p-value (``scipy.stats.spearmanr``).

    Ties get average ranks, so ρ is the Pearson correlation of the rank vectors. A
    constant input (or fewer than two pairs) has no defined ρ: returns (nan, nan)
    without letting scipy's warnings escape.
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if xa.shape != ya.shape:
        raise ValueError(f"spearman needs paired inputs, got {xa.shape} and {ya.shape}")
    if xa.size < 2 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return math.nan, math.nan
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = _sps.spearmanr(xa, ya)
    return float(result.statistic), float(result.pvalue)


def significance_stars(p: float) -> str:
    """Conventional stars: "***" p < 0.001, "**" p < 0.01, "*" p < 0.05, else "" (NaN → "")."""
    if p is None or not np.isfinite(p):
        return ""
    if p < 0.001:
        return "***"
    if p < 0.01:
        return "**"
    if p < 0.05:
        return "*"
    return ""
