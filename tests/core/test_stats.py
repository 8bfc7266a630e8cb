"""Statistics helpers: McNemar, Holm, paired bootstrap, Spearman, stars."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from madara_cli.core import stats

# --- McNemar -------------------------------------------------------------------------------------


def test_mcnemar_exact_reproduces_table14_pde_row():
    # Table 14: Llama-3.1-8B PDE vs NF on CONFLICTS, b = 97, c = 11, p = 2.4e-18.
    assert stats.mcnemar(97, 11, "exact") == pytest.approx(2.4e-18, rel=0.02)


def test_mcnemar_chi2_variants_follow_their_formulas():
    b, c = 30, 11
    assert stats.mcnemar(b, c, "chi2-cc") == pytest.approx(sps.chi2.sf((abs(b - c) - 1) ** 2 / (b + c), 1))
    assert stats.mcnemar(b, c, "chi2") == pytest.approx(sps.chi2.sf((b - c) ** 2 / (b + c), 1))
    # The correction makes the test more conservative.
    assert stats.mcnemar(b, c, "chi2-cc") > stats.mcnemar(b, c, "chi2")


def test_mcnemar_edge_cases():
    assert stats.mcnemar(0, 0) == 1.0
    assert stats.mcnemar(5, 5, "exact") == pytest.approx(1.0)
    assert stats.mcnemar(3, 9) == pytest.approx(stats.mcnemar(9, 3))
    with pytest.raises(ValueError, match="exact.*chi2-cc.*chi2"):
        stats.mcnemar(3, 4, "wald")
    with pytest.raises(ValueError):
        stats.mcnemar(-1, 4)


@pytest.mark.parametrize("b,c", [(36, 12), (14, 11), (23, 10), (97, 11), (0, 4), (1, 0), (250, 190)])
def test_mcnemar_matches_statsmodels(b, c):
    sm = pytest.importorskip("statsmodels.stats.contingency_tables")
    table = [[10, b], [c, 10]]
    assert stats.mcnemar(b, c, "exact") == pytest.approx(sm.mcnemar(table, exact=True).pvalue, rel=1e-9)
    assert stats.mcnemar(b, c, "chi2-cc") == pytest.approx(sm.mcnemar(table, exact=False, correction=True).pvalue, rel=1e-9)
    assert stats.mcnemar(b, c, "chi2") == pytest.approx(sm.mcnemar(table, exact=False, correction=False).pvalue, rel=1e-9)


def test_discordant_counts():
    a = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    b = np.array([1, 0, 1, 0, 0, 0], dtype=bool)
    assert stats.discordant(a, b) == (2, 1)
    with pytest.raises(ValueError):
        stats.discordant([True], [True, False])


# --- Holm ------------------------------------------------------------------------------------------


def test_holm_by_hand():
    # Sorted: 0.01*3 = 0.03, 0.02*2 = 0.04, 0.04*1 = 0.04 (running max).
    assert stats.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert stats.holm([0.5, 0.9]).max() == 1.0  # clipped
    assert stats.holm([]).size == 0


def test_holm_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 15))
        expected = multitest.multipletests(p, method="holm")[1]
        assert stats.holm(p) == pytest.approx(expected)


def test_holm_is_monotone_in_the_raw_order():
    p = np.array([0.001, 0.2, 0.03, 0.04, 0.0001])
    adjusted = stats.holm(p)
    order = np.argsort(p)
    assert np.all(np.diff(adjusted[order]) >= -1e-15)
    assert np.all(adjusted >= p)


# --- paired bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_is_reproducible_and_seeded():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    first = stats.paired_bootstrap(a, b, n_resamples=2000, seed=7)
    assert stats.paired_bootstrap(a, b, n_resamples=2000, seed=7) == first
    assert stats.paired_bootstrap(a, b, n_resamples=2000, seed=8) != first
    assert first.mean_diff == pytest.approx(a.mean() - b.mean())


def test_bootstrap_ci_covers_the_true_difference():
    rng = np.random.default_rng(11)
    n = 2000
    a = (rng.random(n) < 0.6).astype(float)
    b = (rng.random(n) < 0.4).astype(float)
    result = stats.paired_bootstrap(a, b, n_resamples=3000, seed=0)
    assert result.ci_low < 0.2 < result.ci_high
    assert result.ci_low < result.mean_diff < result.ci_high
    assert result.p_value < 0.001


def test_bootstrap_null_and_errors():
    a = np.array([1, 0, 1, 0])
    assert stats.paired_bootstrap(a, a, n_resamples=100).p_value == 1.0
    with pytest.raises(ValueError):
        stats.paired_bootstrap([1, 0], [1])
    with pytest.raises(ValueError):
        stats.paired_bootstrap([], [])


def test_bootstrap_p_is_two_sided_share_on_the_other_side():
    # 6 of 10 pairs favour A by one point, 4 favour B: a weak effect, p well above 0.05.
    a = np.array([1] * 6 + [0] * 4)
    b = np.array([0] * 6 + [1] * 4)
    result = stats.paired_bootstrap(a, b, n_resamples=4000, seed=1)
    assert 0.2 < result.p_value <= 1.0


# --- Spearman and stars ----------------------------------------------------------------------------


def test_spearman_values_and_constant_input():
    rho, p = stats.spearman([1, 2, 3], [0.76, 0.43, 0.08])
    assert rho == pytest.approx(-1.0)
    rho, _ = stats.spearman([1, 2, 3], [0.39, 0.04, 0.14])
    assert rho == pytest.approx(-0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rho, p = stats.spearman([1, 2, 3], [0.5, 0.5, 0.5])
    assert math.isnan(rho) and math.isnan(p)
    assert math.isnan(stats.spearman([1], [2])[0])


def test_significance_stars():
    assert [stats.significance_stars(p) for p in (0.0009, 0.001, 0.009, 0.049, 0.05, float("nan"))] == ["***", "**", "**", "*", "", ""]


def test_proportion_intervals_are_never_zero_width_at_small_n():
    """The small-n rule: 0/5 is [0, 43.4%] (Wilson) or [0, 52.2%] (Clopper-Pearson), as textbooks give."""
    assert stats.proportion_interval(0, 5) == pytest.approx((0.0, 0.43448), abs=1e-5)
    assert stats.proportion_interval(0, 5, method="exact") == pytest.approx((0.0, 1 - 0.025 ** (1 / 5)), abs=1e-9)
    lo, hi = stats.proportion_interval(5, 5)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.43448, abs=1e-5)
    for bad in ((6, 5), (-1, 5), (0, 0)):
        with pytest.raises(ValueError):
            stats.proportion_interval(*bad)
    with pytest.raises(ValueError, match="wilson, exact"):
        stats.proportion_interval(1, 5, method="wald")


def test_newcombe_paired_interval_covers_at_its_level():
    """Newcombe's method 10 on paired 0/1 outcomes: never zero width, and close to 95%
    coverage at n = 30 (simulated, seeded)."""
    d, lo, hi = stats.paired_proportion_difference([0] * 5, [0] * 5)
    assert d == 0 and lo < -0.4 and hi > 0.4
    rng = np.random.default_rng(0)
    n, hits, trials = 30, 0, 2000
    for _ in range(trials):
        # both right 0.2, A only 0.1, B only 0.3, neither 0.4: p_A − p_B = −0.2, correlated as two strategies on one question set are
        cat = rng.choice(4, size=n, p=[0.2, 0.1, 0.3, 0.4])
        _, lo, hi = stats.paired_proportion_difference(cat <= 1, (cat == 0) | (cat == 2))
        hits += lo <= -0.2 <= hi
    assert 0.925 <= hits / trials <= 0.99


def test_mean_and_difference_intervals_pick_by_outcome_kind():
    em = stats.mean_interval([0, 0, 0, 0, 0])
    assert em.method == "wilson" and em.shown and em.high > 0.4
    f1 = stats.mean_interval([0.2, 0.5, 0.1])
    assert f1.method == "none" and not f1.shown and "below 10" in f1.why
    assert stats.mean_interval(np.linspace(0.05, 0.95, 12)).method == "bootstrap"
    diff = stats.difference_interval([1, 1, 0], [0, 1, 0])
    assert diff.method == "newcombe" and diff.low < 0 < diff.high
    assert stats.format_interval(em) == "0.0 [0.0, 43.4]" and stats.format_interval(f1) == "26.7"
    assert stats.format_interval(diff, signed=True).startswith("+33.3 [")
