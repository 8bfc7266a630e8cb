"""The exact fast path of the paired bootstrap (multinomial counts of win/loss/tie
pairs) draws the same distribution as resampling query indices."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from madara_cli.core import stats


def _em_pairs(n: int, seed: int, pa: float = 0.55, pb: float = 0.45):
    rng = np.random.default_rng(seed)
    return (rng.random(n) < pa).astype(int), (rng.random(n) < pb).astype(int)


def test_auto_takes_the_counts_path_for_01_outcomes_and_the_loop_for_continuous():
    a, b = _em_pairs(200, 0)
    assert stats.paired_bootstrap(a, b, 500, seed=3) == stats.paired_bootstrap(a, b, 500, seed=3, method="counts")
    rng = np.random.default_rng(1)
    f1a, f1b = rng.random(200), rng.random(200)  # 200 distinct differences
    assert stats.paired_bootstrap(f1a, f1b, 500, seed=3) == stats.paired_bootstrap(f1a, f1b, 500, seed=3, method="resample")
    with pytest.raises(ValueError, match="valid: auto, counts, resample"):
        stats.paired_bootstrap(a, b, 10, method="fast")


def test_counts_and_resample_give_the_same_distribution():
    a, b = _em_pairs(300, 5)
    d = (a - b).astype(float)
    B = 20_000
    fast = stats.bootstrap_means_counts(*np.unique(d, return_counts=True), B, seed=11)
    slow = stats.bootstrap_means_resample(d, B, seed=12)
    # Both centre on the observed mean with the plug-in variance var(d)/n.
    se = math.sqrt(d.var() / d.size)
    for m in (fast, slow):
        assert abs(m.mean() - d.mean()) < 5 * se / math.sqrt(B)
        assert m.std() == pytest.approx(se, rel=0.03)
    # Same quantiles within Monte Carlo error (a few grid steps of 1/n).
    for q in (0.025, 0.25, 0.5, 0.75, 0.975):
        assert abs(np.quantile(fast, q) - np.quantile(slow, q)) <= 2.0 / d.size + 1e-12
    # The resampled means live on the same lattice {k/n}, and a two-sample KS test
    # does not tell the two apart.
    assert np.allclose(fast * d.size, np.round(fast * d.size))
    assert sps.ks_2samp(fast, slow).pvalue > 0.001


def test_counts_path_matches_the_exact_law_of_the_resampled_sum():
    # n = 6 pairs: 3 wins, 1 loss, 2 ties. The resampled sum W - L has an exact law
    # from the multinomial pmf; both paths must reproduce it.
    d = np.array([1, 1, 1, -1, 0, 0], dtype=float)
    n, B = d.size, 40_000
    exact: dict[int, float] = {}
    for w in range(n + 1):
        for l_ in range(n + 1 - w):
            p = sps.multinomial.pmf([w, l_, n - w - l_], n, [3 / 6, 1 / 6, 2 / 6])
            exact[w - l_] = exact.get(w - l_, 0.0) + p
    for means in (stats.bootstrap_means_counts(*np.unique(d, return_counts=True), B, 0), stats.bootstrap_means_resample(d, B, 1)):
        sums = np.round(means * n).astype(int)
        for s, p in exact.items():
            share = float(np.mean(sums == s))
            assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / B) + 1e-3, (s, share, p)


def test_p_values_and_cis_agree_across_paths_for_fixed_seeds():
    a, b = _em_pairs(400, 9, 0.6, 0.5)
    fast = [stats.paired_bootstrap(a, b, 4000, seed=s, method="counts") for s in range(5)]
    slow = [stats.paired_bootstrap(a, b, 4000, seed=s, method="resample") for s in range(5)]
    for f, s in zip(fast, slow):
        assert f.mean_diff == s.mean_diff
        assert abs(f.ci_low - s.ci_low) <= 2.5 / 400 and abs(f.ci_high - s.ci_high) <= 2.5 / 400
    pf, ps = np.mean([f.p_value for f in fast]), np.mean([s.p_value for s in slow])
    assert abs(pf - ps) < 0.02
    # A null difference stays p = 1 on both paths.
    assert stats.paired_bootstrap(a, a, 100, method="counts").p_value == 1.0
