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


BOOTSTRAP_METHODS = ("auto", "counts", "resample")
# Above this many distinct paired differences the counts path stops paying off.
MAX_DISTINCT_FOR_COUNTS = 64


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "auto",
) -> BootstrapResult:
    """Paired (query-level) bootstrap of the mean difference mean(a − b) (Efron & Tibshirani 1993, ch. 13, 16).

    Queries are resampled with replacement ``n_resamples`` times from
    ``numpy.random.default_rng(seed)``; the CI is the percentile interval.

    Two ways to draw the same bootstrap distribution (``method``):

    - ``"resample"``: draw n query indices per resample and average their differences
      (O(n) per resample).
    - ``"counts"``: the exact fast path for discrete outcomes. A resample's mean
      difference depends only on how many times each *distinct* difference value was
      drawn, and those counts are Multinomial(n, value shares); for 0/1 outcomes (EM)
      the values are −1, 0, +1 (loss, tie, win), so one resample is one multinomial
      draw of three counts (O(distinct values) per resample). The resampled means
      have exactly the distribution of the ``"resample"`` path; only the random
      stream differs, so for one seed the two agree within Monte Carlo error.
    - ``"auto"`` (default): ``"counts"`` when the differences take at most
      ``MAX_DISTINCT_FOR_COUNTS`` distinct values, else ``"resample"``.

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
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"unknown bootstrap method {method!r}; valid: {', '.join(BOOTSTRAP_METHODS)}")
    diff = x - y
    observed = float(diff.mean())
    values, counts = np.unique(diff, return_counts=True)
    if method == "counts" or (method == "auto" and values.size <= MAX_DISTINCT_FOR_COUNTS):
        means = bootstrap_means_counts(values, counts, n_resamples, seed)
    else:
        means = bootstrap_means_resample(diff, n_resamples, seed)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    if observed > 0:
        p = 2.0 * float(np.mean(means <= 0))
    elif observed < 0:
        p = 2.0 * float(np.mean(means >= 0))
    else:
        p = 1.0
    return BootstrapResult(observed, float(lo), float(hi), min(p, 1.0), int(diff.size), n_resamples, seed)


def bootstrap_means_resample(diff: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Resampled means of ``diff`` by drawing query indices (the general path)."""
    n = diff.size
    rng = np.random.default_rng(seed)
    # Resample in fixed-size chunks so memory stays bounded for large cells; the chunk
    # size is constant, so the result depends only on the seed.
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    return means


def bootstrap_means_counts(values: np.ndarray, counts: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Resampled means from multinomial counts of the distinct values (the exact
    fast path for discrete outcomes; see :func:`paired_bootstrap`)."""
    values = np.asarray(values, dtype=float)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, counts / n, size=n_resamples)  # (B, distinct values)
    # Integer-valued differences (EM: -1, 0, +1) sum exactly; the division is the only rounding.
    return (draws @ values) / n


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


# ---------------------------------------------------------------------------
# The small-n rule: how every verb, table and figure states its uncertainty.
#
# - A cell's EM (or any 0/1 outcome: contains, em_strict) is a proportion of its
#   questions: its interval is Wilson's score interval (Wilson 1927), or the exact
#   Clopper-Pearson one (Clopper & Pearson 1934) on request. Both stay honest at any n:
#   0/5 gives [0, 43.4%] (Wilson), never the zero-width "certain 0" a percentile
#   bootstrap draws.
# - A difference of two cells' EM on the same questions is a paired difference of
#   proportions: Newcombe's hybrid score interval for paired data (Newcombe 1998,
#   method 10), tested by McNemar's exact test; also honest at any n.
# - A metric that is not 0/1 (F1) gets a percentile bootstrap only from
#   MIN_N_FOR_BOOTSTRAP queries or pairs up; below, no interval is drawn and the
#   reader is told why.

PROPORTION_METHODS = ("wilson", "exact")
CONFIDENCE = 0.95
# Below this many queries (or pairs) a percentile interval from resampling says more
# about the resampler than about the methods.
MIN_N_FOR_BOOTSTRAP = 10


def proportion_interval(k: int, n: int, confidence: float = CONFIDENCE, method: str = "wilson") -> tuple[float, float]:
    """Two-sided interval for a proportion of ``k`` successes in ``n`` trials.

    - ``"wilson"`` (default): Wilson's score interval,
      (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n), z the normal quantile.
    - ``"exact"``: Clopper-Pearson, the Beta quantiles B(α/2; k, n−k+1) and
      B(1−α/2; k+1, n−k), never below the nominal coverage.

    Both are computed by ``scipy.stats.binomtest(k, n).proportion_ci``. ValueError
    for n < 1 or k outside [0, n]."""
    if method not in PROPORTION_METHODS:
        raise ValueError(f"unknown interval method {method!r}; valid: {', '.join(PROPORTION_METHODS)}")
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = _sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return float(ci.low), float(ci.high)


def is_binary(values: Sequence[float] | np.ndarray) -> bool:
    """Whether every value is 0 or 1 (an outcome a proportion counts)."""
    v = np.asarray(values, dtype=float)
    return bool(np.all((v == 0) | (v == 1)))


def paired_proportion_difference(a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray,
                                 confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(Δ, low, high): p̂_A − p̂_B on paired 0/1 outcomes and Newcombe's hybrid score
    interval for it (Newcombe 1998, "Improved confidence intervals for the difference
    between binomial proportions based on paired data", method 10).

    With the 2×2 counts e (both right), b (A only), c (B only), f (both wrong), (l₁, u₁)
    and (l₂, u₂) the Wilson intervals of p̂_A and p̂_B, and φ the correlation
    (ef − bc)/√((e+b)(c+f)(e+c)(b+f)) (0 when a margin is empty):
    L = Δ − √((p̂_A−l₁)² − 2φ(p̂_A−l₁)(u₂−p̂_B) + (u₂−p̂_B)²),
    U = Δ + √((u₁−p̂_A)² − 2φ(u₁−p̂_A)(p̂_B−l₂) + (p̂_B−l₂)²)."""
    a = np.asarray(a_correct, dtype=bool)
    bb = np.asarray(b_correct, dtype=bool)
    if a.shape != bb.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired outcomes must be 1-D, non-empty and of equal length, got {a.shape} and {bb.shape}")
    n = a.size
    e, b = int(np.sum(a & bb)), int(np.sum(a & ~bb))
    c, f = int(np.sum(~a & bb)), int(np.sum(~a & ~bb))
    p1, p2 = (e + b) / n, (e + c) / n
    l1, u1 = proportion_interval(e + b, n, confidence)
    l2, u2 = proportion_interval(e + c, n, confidence)
    denom = (e + b) * (c + f) * (e + c) * (b + f)
    phi = (e * f - b * c) / math.sqrt(denom) if denom > 0 else 0.0
    d = p1 - p2
    lower = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    upper = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return d, max(-1.0, d - lower), min(1.0, d + upper)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval (fractions), how it was made, and n. ``low``
    and ``high`` are None where the rule draws no interval; ``why`` then says why."""

    value: float
    low: float | None
    high: float | None
    n: int
    method: str
    why: str = ""

    @property
    def shown(self) -> bool:
        return self.low is not None and self.high is not None

    def excludes_zero(self) -> bool:
        return self.shown and (self.low > 0 or self.high < 0)


def mean_interval(values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE, n_resamples: int = 10_000, seed: int = 0) -> Interval:
    """The rule's interval for one cell's mean outcome: Wilson for 0/1 outcomes at any
    n, a seeded percentile bootstrap for other metrics from MIN_N_FOR_BOOTSTRAP
    queries up, none below (``why`` says so)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("an interval needs at least one outcome")
    mean = float(v.mean())
    if is_binary(v):
        lo, hi = proportion_interval(int(v.sum()), v.size, confidence)
        return Interval(mean, lo, hi, int(v.size), "wilson")
    if v.size < MIN_N_FOR_BOOTSTRAP:
        return Interval(mean, None, None, int(v.size), "none", f"n = {v.size} is below {MIN_N_FOR_BOOTSTRAP}: no interval for a non-0/1 metric")
    boot = paired_bootstrap(v, np.zeros(v.size), n_resamples=n_resamples, seed=seed, confidence=confidence)
    return Interval(mean, boot.ci_low, boot.ci_high, int(v.size), "bootstrap")


def difference_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE,
                        n_resamples: int = 10_000, seed: int = 0) -> Interval:
    """The rule's interval for mean(a − b) on paired outcomes: Newcombe's paired score
    interval for 0/1 outcomes at any n; for other metrics a seeded paired bootstrap
    from MIN_N_FOR_BOOTSTRAP pairs up, unless every pair differs by the same amount
    (each resample would have the same mean: zero width); none otherwise."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired outcomes must be 1-D, non-empty and of equal length, got {x.shape} and {y.shape}")
    if is_binary(x) and is_binary(y):
        d, lo, hi = paired_proportion_difference(x > 0.5, y > 0.5, confidence)
        return Interval(d, lo, hi, int(x.size), "newcombe")
    diff = x - y
    if x.size < MIN_N_FOR_BOOTSTRAP:
        return Interval(float(diff.mean()), None, None, int(x.size), "none", f"n = {x.size} pairs is below {MIN_N_FOR_BOOTSTRAP}: no interval")
    if np.unique(diff).size == 1:
        return Interval(float(diff.mean()), None, None, int(x.size), "none", "every pair differs by the same amount: a resampled interval would have zero width")
    boot = paired_bootstrap(x, y, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return Interval(boot.mean_diff, boot.ci_low, boot.ci_high, int(x.size), "bootstrap")


def format_interval(iv: Interval | None, signed: bool = False, digits: int = 1) -> str:
    """``"20.0 [3.6, 62.4]"`` in percent (``signed``: ``"+20.0 [−5.1, +41.0]"``); the
    point alone where the rule draws no interval; "—" for None."""
    if iv is None:
        return "—"
    spec = f"+.{digits}f" if signed else f".{digits}f"
    point = format(100 * iv.value, spec)
    if not iv.shown:
        return point
    return f"{point} [{format(100 * iv.low, spec)}, {format(100 * iv.high, spec)}]"


def rate_interval(rate: float | None, n: int, confidence: float = CONFIDENCE, method: str = "wilson") -> Interval | None:
    """The rule's interval for a stored 0/1 rate (EM, contains) over ``n`` queries, from
    the aggregate alone: k = round(rate · n) successes. None without a rate or queries."""
    if rate is None or not n or not math.isfinite(rate):
        return None
    k = min(max(round(float(rate) * n), 0), int(n))
    lo, hi = proportion_interval(k, int(n), confidence, method)
    return Interval(float(rate), lo, hi, int(n), method)
