"""Significance tests and resampling to compare cells and audit the paper: small, pure,
vectorised, every resampling seeded. The paper's tests: McNemar on discordant pairs with Holm-
Bonferroni (G.3, Table 14), a paired bootstrap over queries (Table 6), Spearman (H.1, Section 3).
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
    """Two-sided p of McNemar's test (1947); ``b``: method right and baseline wrong, ``c`` the
    reverse. ``"exact"``: binomial test of min(b, c) ~ Binomial(b + c, 1/2) (``scipy.stats.
    binomtest``); ``"chi2-cc"``: (|b − c| − 1)² / (b + c) against χ²(1) (Edwards' correction);
    ``"chi2"``: (b − c)² / (b + c), uncorrected. b + c = 0 gives 1.0 by convention."""
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
    """(b, c) = (#A right and B wrong, #A wrong and B right): McNemar's off-diagonal cells."""
    a = np.asarray(a_correct, dtype=bool)
    bb = np.asarray(b_correct, dtype=bool)
    if a.shape != bb.shape:
        raise ValueError(f"paired outcomes must have the same shape, got {a.shape} and {bb.shape}")
    return int(np.sum(a & ~bb)), int(np.sum(~a & bb))


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values (Holm 1979), in input order: p̃_(i) =
    max_{j ≤ i} min(1, (m − j + 1) · p_(j)) over p ascending; reject H_i at α iff p̃_i ≤ α."""
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
MAX_DISTINCT_FOR_COUNTS = 64  # above this many distinct paired differences the counts path stops paying off


def paired_bootstrap(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, n_resamples: int = 10_000, seed: int = 0,
                     confidence: float = 0.95, method: str = "auto") -> BootstrapResult:
    """Paired (query-level) bootstrap of mean(a − b) (Efron & Tibshirani 1993, ch. 13, 16):
    ``n_resamples`` draws from ``default_rng(seed)``, a percentile CI. ``method``:
    ``"resample"`` draws n query indices per resample (O(n)); ``"counts"``, exact for discrete
    outcomes, draws Multinomial(n, shares) counts of the distinct differences (EM: −1, 0, +1),
    the same distribution on another random stream (agreeing within Monte Carlo error);
    ``"auto"``, counts up to ``MAX_DISTINCT_FOR_COUNTS`` distinct values. p: twice the share of
    resampled means on the other side of 0 from the observed (0 counts as other), capped at 1;
    an observed 0 gives p = 1."""
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
    # fixed-size chunks bound memory; the size is constant, so the result depends only on the seed
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    return means


def bootstrap_means_counts(values: np.ndarray, counts: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Resampled means from multinomial counts of the distinct values (:func:`paired_bootstrap`'s fast path)."""
    values = np.asarray(values, dtype=float)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, counts / n, size=n_resamples)  # (B, distinct values)
    # Integer-valued differences (EM: -1, 0, +1) sum exactly; the division is the only rounding.
    return (draws @ values) / n


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Spearman's ρ (average ranks for ties) and its two-sided p (``scipy.stats.spearmanr``);
    (nan, nan), scipy's warnings silenced, for a constant input or fewer than two pairs."""
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


# --- The small-n rule: how every verb, table and figure states its uncertainty ---
# A cell's 0/1 outcome (EM, contains, em_strict) gets Wilson's score interval (1927), or exact
# Clopper-Pearson (1934) on request: honest at any n (0/5 gives [0, 43.4%], never a bootstrap's
# zero-width "certain 0"). Two cells' paired EM difference gets Newcombe's hybrid score interval
# (1998, method 10), tested by exact McNemar. A non-0/1 metric (F1) gets a percentile bootstrap
# only from MIN_N_FOR_BOOTSTRAP queries or pairs up; below, none, and the reader is told why.

PROPORTION_METHODS = ("wilson", "exact")
CONFIDENCE = 0.95
MIN_N_FOR_BOOTSTRAP = 10  # below this, a resampled interval says more about the resampler than the methods


def proportion_interval(k: int, n: int, confidence: float = CONFIDENCE, method: str = "wilson") -> tuple[float, float]:
    """Two-sided interval for ``k`` successes in ``n`` trials by ``scipy.stats.binomtest(k, n).
    proportion_ci``: ``"wilson"``, (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n);
    ``"exact"``, Clopper-Pearson's Beta quantiles B(α/2; k, n−k+1), B(1−α/2; k+1, n−k), never
    below nominal coverage. ValueError for n < 1 or k outside [0, n]."""
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
    """(Δ, low, high): p̂_A − p̂_B on paired 0/1 outcomes with Newcombe's hybrid score interval
    (1998, paired data, method 10). With counts e (both right), b (A only), c (B only), f
    (neither), Wilson intervals (l₁, u₁), (l₂, u₂) and φ = (ef − bc)/√((e+b)(c+f)(e+c)(b+f))
    (0 when a margin is empty): L = Δ − √((p̂_A−l₁)² − 2φ(p̂_A−l₁)(u₂−p̂_B) + (u₂−p̂_B)²),
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
    """A point estimate, its interval (fractions; None where the rule draws none, ``why`` says why), method and n."""

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
    """The rule's interval for a cell's mean: Wilson for 0/1 outcomes, else a seeded percentile
    bootstrap from MIN_N_FOR_BOOTSTRAP queries up, none below (``why`` says so)."""
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
    """The rule's interval for paired mean(a − b): Newcombe's for 0/1 outcomes, else a seeded
    paired bootstrap from MIN_N_FOR_BOOTSTRAP pairs up unless every pair differs alike (zero
    width); none otherwise."""
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
    """``"20.0 [3.6, 62.4]"`` in percent (``signed``: ``"+20.0 [−5.1, +41.0]"``); the point alone without an interval; "—" for None."""
    if iv is None:
        return "—"
    spec = f"+.{digits}f" if signed else f".{digits}f"
    point = format(100 * iv.value, spec)
    if not iv.shown:
        return point
    return f"{point} [{format(100 * iv.low, spec)}, {format(100 * iv.high, spec)}]"


def rate_interval(rate: float | None, n: int, confidence: float = CONFIDENCE, method: str = "wilson") -> Interval | None:
    """The rule's interval for a stored 0/1 rate over ``n`` queries, k = round(rate · n); None without a rate or queries."""
    if rate is None or not n or not math.isfinite(rate):
        return None
    k = min(max(round(float(rate) * n), 0), int(n))
    lo, hi = proportion_interval(k, int(n), confidence, method)
    return Interval(float(rate), lo, hi, int(n), method)
