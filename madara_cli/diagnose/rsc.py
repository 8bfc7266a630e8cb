"""Reasoning-Score Coupling (RSC): the probe's statistics, per the MADARA paper (*To Isolate
or to Score?*) Section 3 (Eqs. 1-2, Definition 1), Appendix F (F.2 per-query, F.3 split-half
and 30-query subsets, F.4 rho-bar), G.2 (Table 13, bootstrap CIs) and I (score entropy).

Each calibration (query, document) pair is scored once with chain-of-thought ("normal"), then
rescored with its reasoning perturbed at three increasing severities, :data:`LEVELS` (see
:mod:`madara_cli.diagnose.perturb`). rho_k = Spearman(normal, perturbed_k) pooled over all pairs
(Eq. 1); rho* = Spearman([1, 2, 3], [rho_1, rho_2, rho_3]) (Eq. 2); a pair is *quality-ordered*
iff rho* = -1 (rho_1 > rho_2 > rho_3), else *stochastic*.

Pure, no model calls. Score matrices are ``[query][document]``, maybe ragged; NaN (a parse
failure) is dropped pairwise; every resampling takes a ``seed``. Results are the typed records
of :mod:`madara_cli.results.probe_stats` (written by the probe, read by the store).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from madara_cli.results.probe_stats import Bootstrap, Degeneracy, PerQuery, ProbeStats, SplitHalf, Subsets, json_safe

LEVELS: tuple[str, str, str] = ("shuffled", "contradicted", "random")
QUALITY_ORDERED = "quality-ordered"
STOCHASTIC = "stochastic"
DEGENERATE = "degenerate"
RSC_CLASSES = (QUALITY_ORDERED, STOCHASTIC, DEGENERATE)


# --- Score matrices and the rank machinery shared by every resampling ---

ScoreMatrix = Sequence[Sequence[float]] | np.ndarray


def as_score_matrix(scores: ScoreMatrix) -> np.ndarray:
    """``[query][doc]`` scores as a float (n_queries, max_docs) array, ragged rows NaN-padded."""
    if isinstance(scores, np.ndarray):
        array = scores.astype(float, copy=False)
        if array.ndim != 2:
            raise ValueError(f"scores must be 2-D [query][doc], got shape {array.shape}")
        return array
    rows = [np.asarray(row, dtype=float).ravel() for row in scores]
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for j, row in enumerate(rows):
        out[j, : len(row)] = row
    return out


def _paired(normal: ScoreMatrix, perturbed: ScoreMatrix) -> tuple[np.ndarray, np.ndarray]:
    x, y = as_score_matrix(normal), as_score_matrix(perturbed)
    if x.shape != y.shape:
        raise ValueError(f"normal scores {x.shape} and perturbed scores {y.shape} differ in shape")
    return x, y


@dataclass(frozen=True)
class _PooledPairs:
    """One level's valid (normal, perturbed) pairs, pooled, with tie groups. A resample only
    reweights pairs, so its Spearman rho is a *weighted* Spearman here: w copies of a pair share
    a tie group of mid-rank (count below) + (group weight + 1) / 2, exactly as if materialised,
    turning 1,000 bootstrap resamples into a few (B, N) array operations."""

    query: np.ndarray  # (N,) query index of each pair
    x_order: np.ndarray
    x_starts: np.ndarray
    x_group: np.ndarray
    y_order: np.ndarray
    y_starts: np.ndarray
    y_group: np.ndarray
    n_queries: int


def _tie_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new_group = np.r_[True, ordered[1:] != ordered[:-1]] if len(ordered) else np.zeros(0, bool)
    starts = np.flatnonzero(new_group)
    group = np.empty(len(values), dtype=np.intp)
    group[order] = np.cumsum(new_group) - 1
    return order, starts, group


def _pool(normal: np.ndarray, perturbed: np.ndarray) -> _PooledPairs:
    valid = ~(np.isnan(normal) | np.isnan(perturbed))
    query = np.nonzero(valid)[0]
    x, y = normal[valid], perturbed[valid]
    return _PooledPairs(query, *_tie_groups(x), *_tie_groups(y), n_queries=normal.shape[0])


def _weighted_midranks(w: np.ndarray, order: np.ndarray, starts: np.ndarray, group: np.ndarray) -> np.ndarray:
    group_weight = np.add.reduceat(w[:, order], starts, axis=1)
    below = np.cumsum(group_weight, axis=1) - group_weight
    return (below + (group_weight + 1.0) / 2.0)[:, group]


def _weighted_spearman(pairs: _PooledPairs, query_weights: np.ndarray, chunk: int = 4_000_000) -> np.ndarray:
    """Spearman rho of the pooled pairs under each row of ``query_weights`` (B, n_queries): the
    weighted Pearson correlation of mid-ranks; NaN where a side is constant or has < 2 pairs."""
    n_rows = query_weights.shape[0]
    out = np.full(n_rows, np.nan)
    n_pairs = len(pairs.query)
    if n_pairs < 2:
        return out
    step = max(1, chunk // n_pairs)  # bound the (B, N) temporaries
    for lo in range(0, n_rows, step):
        w = query_weights[lo : lo + step][:, pairs.query].astype(float)
        rx = _weighted_midranks(w, pairs.x_order, pairs.x_starts, pairs.x_group)
        ry = _weighted_midranks(w, pairs.y_order, pairs.y_starts, pairs.y_group)
        total = w.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            dx = rx - (w * rx).sum(axis=1, keepdims=True) / total
            dy = ry - (w * ry).sum(axis=1, keepdims=True) / total
            vx, vy = (w * dx * dx).sum(axis=1), (w * dy * dy).sum(axis=1)
            rho = (w * dx * dy).sum(axis=1) / np.sqrt(vx * vy)
        # non-constant mid-ranks differ by >= 1/2: a variance this small is a constant side
        rho[(vx < 1e-9) | (vy < 1e-9)] = np.nan
        out[lo : lo + step] = np.clip(rho, -1.0, 1.0)
    return out


# --- Correlations (Eqs. 1-2, F.4) ---


def pooled_spearman(normal: ScoreMatrix, perturbed: ScoreMatrix) -> tuple[float, float]:
    """(rho_k, two-sided p) of ``scipy.stats.spearmanr`` over all (query, doc) pairs pooled
    (Eq. 1), NaN pairs dropped; (nan, nan), unwarned, under 3 pairs or with a constant side."""
    x, y = _paired(normal, perturbed)
    valid = ~(np.isnan(x) | np.isnan(y))
    x, y = x[valid], y[valid]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    result = stats.spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def trend(rhos: Sequence[float]) -> float:
    """rho* = Spearman([1, 2, 3], [rho_1, rho_2, rho_3]) (Eq. 2): one of {-1, -0.5, 0, 0.5, 1}
    for distinct values (F.1); ties take scipy's mean rank, adding +-0.866 (Table 4's Gemma-2
    CONFLICTS row .79/.40/.40 gives -0.866, not the paper's -0.5 from unrounded values) and NaN
    (all equal). Any NaN rho_k gives NaN."""
    values = np.asarray(rhos, dtype=float)
    if values.shape != (3,):
        raise ValueError(f"trend needs exactly three per-level correlations, got {values.shape}")
    if np.isnan(values).any() or np.ptp(values) == 0:
        return math.nan
    return float(stats.spearmanr([1, 2, 3], values).statistic)


def is_quality_ordered(rho_star: float) -> bool:
    """Definition 1: quality-ordered iff rho* = -1 (equivalently rho_1 > rho_2 > rho_3)."""
    return not math.isnan(rho_star) and math.isclose(rho_star, -1.0, abs_tol=1e-9)


@dataclass(frozen=True)
class RSCClass:
    """One model-task pair's class from its three rho_k (Section 3.2): ``coupling`` is "strong"
    or "weak" (quality-ordered, rho_1 >= or < threshold), else None; ``rsc_class`` is
    "degenerate" when a rho_k is undefined (constant scores)."""

    rho: tuple[float, float, float]
    rho_star: float
    rsc_class: str
    coupling: str | None
    rho_bar: float


def classify(rhos: Sequence[float], threshold: float = 0.5) -> RSCClass:
    """rho*, class, coupling strength and rho-bar = mean(rho_1..3) (Section 3.2, Eq. 4)."""
    rho = tuple(float(r) for r in rhos)
    if len(rho) != 3:
        raise ValueError(f"classify needs exactly three per-level correlations, got {len(rho)}")
    rho_star = trend(rho)
    if any(math.isnan(r) for r in rho):
        return RSCClass(rho, math.nan, DEGENERATE, None, math.nan)  # type: ignore[arg-type]
    rho_bar = sum(rho) / 3.0
    if not is_quality_ordered(rho_star):
        return RSCClass(rho, rho_star, STOCHASTIC, None, rho_bar)  # type: ignore[arg-type]
    coupling = "strong" if rho[0] >= threshold else "weak"
    return RSCClass(rho, rho_star, QUALITY_ORDERED, coupling, rho_bar)  # type: ignore[arg-type]


def _classes_of(rho_rows: np.ndarray) -> np.ndarray:
    """Vectorised :func:`classify` class for rows of (rho_1, rho_2, rho_3): rho* = -1 exactly
    when strictly decreasing, so scipy is not called per resample."""
    undefined = np.isnan(rho_rows).any(axis=1)
    ordered = (rho_rows[:, 0] > rho_rows[:, 1]) & (rho_rows[:, 1] > rho_rows[:, 2])
    return np.where(undefined, DEGENERATE, np.where(ordered, QUALITY_ORDERED, STOCHASTIC))


def _levels(normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix]) -> tuple[np.ndarray, list[np.ndarray]]:
    if len(perturbed_by_level) != 3:
        raise ValueError(f"need perturbed scores for 3 levels {LEVELS}, got {len(perturbed_by_level)}")
    x = as_score_matrix(normal)
    return x, [_paired(x, p)[1] for p in perturbed_by_level]


def _rhos_under(normal: np.ndarray, perturbed: Sequence[np.ndarray], query_weights: np.ndarray) -> np.ndarray:
    """(B, 3) pooled rho_k for each row of query weights."""
    return np.stack([_weighted_spearman(_pool(normal, p), query_weights) for p in perturbed], axis=1)


# --- Per-query correlations (F.2, Table 10) ---


def per_query_spearman(normal: ScoreMatrix, perturbed: ScoreMatrix) -> np.ndarray:
    """One Spearman rho per query across its documents (F.2); NaN where undefined (under two
    valid documents or a constant side, common: ten documents all scoring 0)."""
    x, y = _paired(normal, perturbed)
    valid = ~(np.isnan(x) | np.isnan(y))
    # Mask pairwise so both sides rank the same documents, then rank within each row.
    rx = stats.rankdata(np.where(valid, x, np.nan), axis=1, nan_policy="omit")
    ry = stats.rankdata(np.where(valid, y, np.nan), axis=1, nan_policy="omit")
    count = valid.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = np.where(valid, rx - np.nansum(rx, axis=1, keepdims=True) / count[:, None], 0.0)
        dy = np.where(valid, ry - np.nansum(ry, axis=1, keepdims=True) / count[:, None], 0.0)
        vx, vy = (dx * dx).sum(axis=1), (dy * dy).sum(axis=1)
        rho = (dx * dy).sum(axis=1) / np.sqrt(vx * vy)
    rho[(count < 2) | (vx < 1e-9) | (vy < 1e-9)] = np.nan
    return np.clip(rho, -1.0, 1.0)


def _nan_stat(values: np.ndarray, fn: Any, **kwargs: Any) -> float:
    finite = values[~np.isnan(values)]
    min_n = 1 + kwargs.get("ddof", 0)
    return float(fn(finite, **kwargs)) if len(finite) >= min_n else math.nan


def per_query_summary(normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix]) -> PerQuery:
    """Table 10: per-query Spearman rho at each level, as mean and sample std (ddof=1)
    over the queries where it is defined, with every query's value (None: undefined)."""
    x, levels = _levels(normal, perturbed_by_level)
    values = [per_query_spearman(x, p) for p in levels]
    return PerQuery(mean=json_safe([_nan_stat(v, np.mean) for v in values]), std=json_safe([_nan_stat(v, np.std, ddof=1) for v in values]),
                    values=json_safe(values))


# --- Resampling stability (G.2 Table 13, F.3 Table 11) ---


def bootstrap(normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix], n_resamples: int = 1000, seed: int = 0,
              level: float = 0.95) -> Bootstrap:
    """The pooled rho_k over queries resampled with replacement (G.2, Table 13): n queries drawn
    as multinomial counts (the same distribution as drawing indices), each with all its
    documents (within-query dependence kept); classes as :func:`classify`, an undefined rho_k
    "degenerate"."""
    x, levels = _levels(normal, perturbed_by_level)
    n = x.shape[0]
    if n == 0:
        raise ValueError("bootstrap needs at least one query")
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    rho_rows = _rhos_under(x, levels, counts)
    full_class = classify([pooled_spearman(x, p)[0] for p in levels]).rsc_class
    classes = _classes_of(rho_rows)
    alpha = (1.0 - level) / 2.0 * 100.0
    finite = [rhos[~np.isnan(rhos)] for rhos in rho_rows.T]  # each level's defined rho_k
    ci = [tuple(float(b) for b in np.percentile(f, [alpha, 100.0 - alpha])) if len(f) else (math.nan, math.nan) for f in finite]
    return Bootstrap(ci=json_safe(ci), stability=float(np.mean(classes == full_class)),
                     class_shares={c: float(np.mean(classes == c)) for c in RSC_CLASSES}, n_resamples=n_resamples)


def _classify_subset(x: np.ndarray, levels: Sequence[np.ndarray], rows: slice | np.ndarray, threshold: float) -> RSCClass:
    return classify([pooled_spearman(x[rows], p[rows])[0] for p in levels], threshold)


def split_half(normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix], threshold: float = 0.5) -> SplitHalf:
    """F.3: the class on queries [0, n//2) and [n//2, n), split by position (the paper's "first
    50 / last 50", so the caller's order matters; odd n gives the last half one more)."""
    x, levels = _levels(normal, perturbed_by_level)
    half = x.shape[0] // 2
    return SplitHalf(first=_classify_subset(x, levels, slice(0, half), threshold).rsc_class,
                     last=_classify_subset(x, levels, slice(half, None), threshold).rsc_class)


def subset_stability(normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix], n_subsets: int = 100, size: int = 30,
                     seed: int = 0) -> Subsets:
    """F.3: classify ``n_subsets`` random ``size``-query subsets (drawn without replacement)."""
    x, levels = _levels(normal, perturbed_by_level)
    n = x.shape[0]
    if not 0 < size <= n:
        raise ValueError(f"subset size {size} needs 1..{n} queries")
    rng = np.random.default_rng(seed)
    weights = np.zeros((n_subsets, n))
    for row in weights:
        row[rng.choice(n, size=size, replace=False)] = 1.0
    classes = _classes_of(_rhos_under(x, levels, weights))
    percent = {c: float(np.mean(classes == c) * 100.0) for c in RSC_CLASSES}
    return Subsets(quality_ordered=percent[QUALITY_ORDERED], stochastic=percent[STOCHASTIC], degenerate=percent[DEGENERATE],
                   size=size, n_subsets=n_subsets)


# --- Degenerate scoring and score entropy (Section 6.2, Appendix I) ---


def degenerate_scoring(scores: ScoreMatrix | Sequence[float], floor: float = 0.0, ceiling: float = 5.0, share: float = 0.9) -> Degeneracy:
    """Flag scores with >= ``share`` of valid values at the floor or at the ceiling,
    all values equal, or no valid value at all (NaNs are ignored)."""
    values = _valid_scores(scores)
    if len(values) == 0:
        return Degeneracy(is_degenerate=True, reason="no parsable scores")
    floor_share = float(np.mean(values <= floor))
    ceiling_share = float(np.mean(values >= ceiling))
    mean = float(np.mean(values))
    reason = None
    if np.ptp(values) == 0:
        reason = f"all {len(values)} scores equal {values[0]:g}"
    elif floor_share >= share:
        reason = f"{floor_share:.0%} of scores at the floor ({floor:g}), mean {mean:.2f}/{ceiling:g}"
    elif ceiling_share >= share:
        reason = f"{ceiling_share:.0%} of scores at the ceiling ({ceiling:g}), mean {mean:.2f}/{ceiling:g}"
    return Degeneracy(is_degenerate=reason is not None, floor_share=floor_share, ceiling_share=ceiling_share, mean_score=mean, reason=reason)


def _valid_scores(scores: ScoreMatrix | Sequence[float]) -> np.ndarray:
    """Every non-NaN score of a ``[query][doc]`` matrix or a flat sequence, flattened."""
    nested = scores.ndim == 2 if isinstance(scores, np.ndarray) else len(scores) > 0 and not np.isscalar(scores[0])
    values = np.asarray(as_score_matrix(scores) if nested else np.asarray(scores, dtype=float), dtype=float).ravel()
    return values[~np.isnan(values)]


def score_entropy(scores: ScoreMatrix | Sequence[float], bins: Sequence[int] = range(0, 6)) -> float:
    """Normalised Shannon entropy H(p) / log(K) of the score histogram (Appendix I; the paper
    gives no binning): each valid score (aggregated ones too) rounded half-up, clipped into
    [min(bins), max(bins)] and counted over K = 6 levels 0..5, so 0 is one level and 1 a uniform
    spread; NaN with no valid score."""
    levels = np.asarray(list(bins), dtype=float)
    values = _valid_scores(scores)
    if len(values) == 0 or len(levels) < 2:
        return math.nan
    rounded = np.clip(np.floor(values + 0.5), levels.min(), levels.max())
    counts = np.array([np.sum(rounded == level) for level in levels], dtype=float)
    p = counts[counts > 0] / counts.sum()
    return float(max(0.0, -np.sum(p * np.log(p)) / np.log(len(levels))))


# --- The whole probe ---


def summarize_probe(
    normal: ScoreMatrix, perturbed_by_level: Sequence[ScoreMatrix], seed: int = 0, *, threshold: float = 0.5, n_resamples: int = 1000,
    n_subsets: int = 100, subset_size: int = 30, floor: float = 0.0, ceiling: float = 5.0, degenerate_share: float = 0.9,
    entropy_scores: ScoreMatrix | None = None, undefined_rho: str = "degenerate",
) -> ProbeStats:
    """Every RSC statistic of one probe (the Table 4 row and its robustness checks) from the CoT
    scores ``normal`` and the rescored (shuffled, contradicted, random) matrices. The entropy is
    of ``entropy_scores`` if given (e.g. the base 3-agent scores, Appendix I's routing
    heuristic), else of ``normal``; the 30-query subsets are None under ``subset_size`` queries.
    ``undefined_rho="zero"`` (``reading.undefined_rho``, the authors' code) counts an undefined
    pooled rho as 0 instead of degenerate (a degenerate score distribution still is)."""
    x, levels = _levels(normal, perturbed_by_level)
    n_queries = x.shape[0]
    n_pairs = int(np.sum(~np.isnan(x)))
    degeneracy = degenerate_scoring(x, floor=floor, ceiling=ceiling, share=degenerate_share)
    entropy = score_entropy(x if entropy_scores is None else entropy_scores)
    entropy_out = None if math.isnan(entropy) else entropy

    pooled = [pooled_spearman(x, p) for p in levels]
    if undefined_rho == "zero":
        pooled = [(0.0, 1.0) if math.isnan(r) else (r, p) for r, p in pooled]
    rhos = tuple(r for r, _ in pooled)
    undefined = [LEVELS[k] for k, r in enumerate(rhos) if math.isnan(r)]
    if undefined and not degeneracy.is_degenerate:
        degeneracy = replace(degeneracy, is_degenerate=True,
                             reason=f"rho undefined at level(s) {', '.join(undefined)}: constant or too few valid scores")
    common = {"degenerate": degeneracy, "entropy": entropy_out, "n_queries": n_queries, "n_pairs": n_pairs, "seed": seed}
    if degeneracy.is_degenerate:
        return ProbeStats(rsc_class=DEGENERATE, **common)

    cls = classify(rhos, threshold)
    return ProbeStats(
        rho=json_safe(cls.rho), p_values=json_safe([p for _, p in pooled]), rho_star=json_safe(cls.rho_star), rho_bar=json_safe(cls.rho_bar),
        rsc_class=cls.rsc_class, coupling=cls.coupling, per_query=per_query_summary(x, levels),
        bootstrap=bootstrap(x, levels, n_resamples=n_resamples, seed=seed),
        split_half=split_half(x, levels, threshold) if n_queries >= 2 else None,
        subsets30=subset_stability(x, levels, n_subsets=n_subsets, size=subset_size, seed=seed) if n_queries >= subset_size else None,
        **common,
    )
