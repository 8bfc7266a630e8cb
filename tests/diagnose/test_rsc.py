"""Tests of the RSC probe's perturbations and statistics (madara_cli.diagnose.rsc)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from madara_cli.diagnose import perturb, rsc

# Table 4: (model, task) -> (rho_1, rho_2, rho_3, paper rho*, paper class).
TABLE4 = {
    ("llama", "cfl"): (0.76, 0.43, 0.08, -1.0, "quality-ordered"),
    ("llama", "fvr"): (0.65, 0.49, 0.10, -1.0, "quality-ordered"),
    ("mistral", "cfl"): (0.35, 0.22, 0.18, -1.0, "quality-ordered"),
    ("mistral", "fvr"): (0.28, 0.09, 0.01, -1.0, "quality-ordered"),
    ("mistral", "tqa"): (0.47, 0.05, 0.02, -1.0, "quality-ordered"),
    ("qwen3", "cfl"): (0.39, 0.04, 0.14, -0.5, "stochastic"),
    ("qwen3", "fvr"): (0.63, 0.51, 0.14, -1.0, "quality-ordered"),
    ("qwen3", "tqa"): (0.64, 0.45, 0.45, -0.5, "stochastic"),
    ("qwen2.5", "cfl"): (0.46, -0.26, 0.08, -0.5, "stochastic"),
    ("qwen2.5", "fvr"): (0.62, 0.21, 0.06, -1.0, "quality-ordered"),
    ("qwen2.5", "tqa"): (0.55, -0.28, 0.15, -0.5, "stochastic"),
    ("gemma", "cfl"): (0.79, 0.40, 0.40, -0.5, "stochastic"),
    ("gemma", "fvr"): (0.58, 0.41, 0.18, -1.0, "quality-ordered"),
    ("gemma", "tqa"): (0.83, 0.19, 0.48, -0.5, "stochastic"),
}
# Rows whose rounded rho_2 == rho_3: the paper's -0.5 came from unrounded values.
ROUNDED_TIES = {("qwen3", "tqa"), ("gemma", "cfl")}


# --------------------------------------------------------------------------- #
# Trend and classification (Eq. 2, Table 4)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("key", sorted(TABLE4))
def test_table4_trend_and_class(key):
    r1, r2, r3, paper_star, paper_class = TABLE4[key]
    result = rsc.classify([r1, r2, r3])
    assert result.rsc_class == paper_class
    if key in ROUNDED_TIES:
        # scipy's mid-rank for the tie gives -sqrt(3)/2, still not -1 -> stochastic.
        assert result.rho_star == pytest.approx(-math.sqrt(3) / 2)
    else:
        assert result.rho_star == pytest.approx(paper_star)
    assert result.rho_bar == pytest.approx((r1 + r2 + r3) / 3)


def test_coupling_strength_follows_rho1():
    assert rsc.classify([0.76, 0.43, 0.08]).coupling == "strong"
    assert rsc.classify([0.35, 0.22, 0.18]).coupling == "weak"
    assert rsc.classify([0.5, 0.2, 0.1]).coupling == "strong"  # rho_1 >= 0.5 is strong
    assert rsc.classify([0.39, 0.04, 0.14]).coupling is None
    assert rsc.classify([0.6, 0.3, 0.1], threshold=0.7).coupling == "weak"


def test_trend_takes_five_values_on_distinct_input_and_nan_on_undefined():
    seen = set()
    for perm in [(3, 2, 1), (3, 1, 2), (2, 3, 1), (1, 3, 2), (2, 1, 3), (1, 2, 3)]:
        seen.add(round(rsc.trend([v / 10 for v in perm]), 6))
    assert seen == {-1.0, -0.5, 0.5, 1.0}
    assert rsc.trend([0.3, 0.1, 0.2]) == pytest.approx(-0.5)
    assert math.isnan(rsc.trend([0.5, float("nan"), 0.1]))
    assert math.isnan(rsc.trend([0.2, 0.2, 0.2]))
    assert rsc.classify([0.5, float("nan"), 0.1]).rsc_class == "degenerate"


def test_vectorised_class_matches_classify():
    rng = np.random.default_rng(3)
    rows = np.round(rng.uniform(-1, 1, size=(500, 3)), 1)  # rounding makes ties common
    rows[::50, 1] = np.nan
    fast = rsc._classes_of(rows)
    slow = [rsc.classify(r).rsc_class for r in rows]
    assert list(fast) == slow


# --------------------------------------------------------------------------- #
# Perturbations (F.1)
# --------------------------------------------------------------------------- #

CHAIN = (
    "The document mentions Paris. It states the population directly. "
    "The claim is supported by the text. Therefore it is relevant. I give a score of 4."
)


def test_split_sentences_keeps_decimals_and_enumerators():
    assert perturb.split_sentences("Score is 4.5 overall. Next one! Last?") == ["Score is 4.5 overall.", "Next one!", "Last?"]
    assert perturb.split_sentences("1. Find entities. 2. Check them.") == ["1. Find entities.", "2. Check them."]
    assert perturb.split_sentences("line one\nline two") == ["line one", "line two"]
    assert perturb.split_sentences(["step a", "  ", "step b"]) == ["step a", "step b"]


def test_shuffle_is_deterministic_per_seed_and_never_a_no_op():
    original = perturb.split_sentences(CHAIN)
    for seed in range(20):
        once, again = perturb.shuffle_reasoning(CHAIN, seed), perturb.shuffle_reasoning(CHAIN, seed)
        assert once == again
        assert once != CHAIN
        assert sorted(perturb.split_sentences(once)) == sorted(original)
    assert len({perturb.shuffle_reasoning(CHAIN, s) for s in range(20)}) > 1
    # Two steps: the identity permutation is drawn half the time and must be rotated.
    assert all(perturb.shuffle_reasoning(["a", "b"], s) == "b\na" for s in range(20))
    assert perturb.shuffle_reasoning("Only one sentence.", 0) == "Only one sentence."


def test_contradict_swaps_both_ways_and_preserves_case():
    text = "Relevant and irrelevant. SUPPORTS vs contradicts. Consistent, inconsistent, accurate, inaccurate."
    assert perturb.contradict_reasoning(text) == (
        "Irrelevant and relevant. CONTRADICTS vs supports. Inconsistent, consistent, inaccurate, accurate."
    )
    assert perturb.contradict_reasoning("reliable unreliable supported supporting support") == (
        "unreliable reliable contradicted contradicting contradict"
    )
    # Whole words only.
    assert perturb.contradict_reasoning("relevance and irrelevantly") == "relevance and irrelevantly"


def test_contradict_inverts_numeric_quality_cues():
    assert perturb.contradict_reasoning("I give a score of 4.") == "I give a score of 1."
    assert perturb.contradict_reasoning("Score of 0; rated 5/5 and 3/5.") == "Score of 5; rated 0/5 and 2/5."
    assert perturb.contradict_reasoning("High quality source, low quality claim.") == "Low quality source, high quality claim."
    assert perturb.contradict_reasoning("a score of 2.5") == "a score of 2.5"
    # Out of the 0-5 scale, or not a /5 fraction: untouched.
    assert perturb.contradict_reasoning("a score of 12, 7/5, 10/50") == "a score of 12, 7/5, 10/50"
    # Involution on the words it touches: applying twice restores the text.
    assert perturb.contradict_reasoning(perturb.contradict_reasoning(CHAIN)) == CHAIN


def test_random_never_returns_own_chain_and_keeps_shape():
    chains = [[f"q{j}d{i}" for i in range(n)] for j, n in enumerate([3, 1, 4, 2])]
    for seed in range(30):
        out = perturb.random_reasoning(chains, seed)
        assert [len(r) for r in out] == [len(r) for r in chains]
        for j, row in enumerate(out):
            for i, chain in enumerate(row):
                assert chain != chains[j][i]
    assert perturb.random_reasoning(chains, 7) == perturb.random_reasoning(chains, 7)
    assert perturb.random_reasoning([["a"], ["b"]], 0) == [["b"], ["a"]]
    with pytest.raises(ValueError):
        perturb.random_reasoning([["alone"]], 0)


def test_random_draws_every_other_pair():
    chains = [["a", "b"], ["c", "d"]]
    donors = {perturb.random_reasoning(chains, s)[0][0] for s in range(200)}
    assert donors == {"b", "c", "d"}


def test_perturb_chains_gives_step_lists_for_every_level():
    chains = [[["step one", "step two", "score of 4"], "Relevant. Accurate."], [["x", "y"], "It supports."]]
    out = perturb.perturb_chains(chains, seed=1)
    assert out.contradicted[0][0] == ["step one", "step two", "score of 1"]
    assert out.contradicted[1][1] == ["It contradicts."]
    assert out.shuffled[0][1] == ["Accurate.", "Relevant."]
    assert all(isinstance(c, list) and all(isinstance(s, str) for s in c) for level in out.by_level() for row in level for c in row)
    assert out == perturb.perturb_chains(chains, seed=1)


@pytest.mark.parametrize(
    "reply, chain",
    [
        ('The document names Varn. {"score": 4, "confidence": 3}', "The document names Varn."),
        ("{'confidence': 5, 'score': 2} It is about another town.", "It is about another town."),
        ("Score: 4/5\nConfidence = 3\nThe year matches.", "The year matches."),
        ('{"reasoning": "Mentions the river.", "score": "3"}', '"reasoning": "Mentions the river."'),
        ('{"score": 4, "confidence": 3}', ""),
        ("```json\n{\"score\": 5}\n```", ""),
        ("", ""),
    ],
)
def test_chain_from_text_drops_every_score_and_confidence_field(reply, chain):
    assert perturb.chain_from_text(reply) == chain
    assert "score" not in perturb.chain_from_text(reply).lower()


def test_empty_chains_stay_empty_and_are_never_random_donors():
    chains = [[["a one.", "a two."], []], [["c."], ["d one.", "d two."]]]
    for seed in range(40):
        out = perturb.perturb_chains(chains, seed=seed)
        assert out.shuffled[0][1] == out.contradicted[0][1] == out.random[0][1] == []
        donors = [c for row in out.random for c in row if c]
        assert len(donors) == 3 and all(c in (["a one.", "a two."], ["c."], ["d one.", "d two."]) for c in donors)
        assert out.random[0][0] != ["a one.", "a two."] and out.random[1][0] != ["c."]
    # With no empty chain the draw is the plain one over all pairs.
    full = [[["x."], ["y."]], [["z."]]]
    assert perturb.perturb_chains(full, seed=3).random == [[perturb.steps_of(c) for c in row] for row in perturb.random_reasoning(full, 3)]


def test_shuffle_splits_steps_at_sentence_boundaries():
    # F.1: R = [r1..rn] split by sentence boundaries, so a two-sentence step is two units.
    steps = ["The document names Paris. It gives the population.", "So it is relevant."]
    assert perturb.split_sentences(steps) == ["The document names Paris.", "It gives the population.", "So it is relevant."]
    shuffled = perturb.shuffled_sentences(steps, 0)
    assert sorted(shuffled) == sorted(perturb.split_sentences(steps)) and shuffled != perturb.split_sentences(steps)
    # One step with several sentences is still perturbed (not a no-op, as whole-step shuffling would be).
    assert perturb.shuffled_sentences(["First. Second. Third."], 3) != ["First.", "Second.", "Third."]


# --------------------------------------------------------------------------- #
# Correlations
# --------------------------------------------------------------------------- #


def synthetic_probe(n_queries=100, n_docs=10, noise=(0.6, 1.5, 6.0), seed=0):
    """Integer 0-5 scores whose perturbed copies get noisier level by level."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n_queries, n_docs))
    to_score = lambda z: np.clip(np.round(2.5 + 1.2 * z), 0, 5)  # noqa: E731
    normal = to_score(latent)
    levels = [to_score(latent + rng.normal(scale=s, size=latent.shape)) for s in noise]
    return normal, levels


def test_pooled_spearman_matches_scipy_and_drops_nan_pairwise():
    normal, levels = synthetic_probe()
    rho, p = rsc.pooled_spearman(normal, levels[0])
    expected = stats.spearmanr(normal.ravel(), levels[0].ravel())
    assert rho == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue)
    normal_nan = normal.copy()
    normal_nan[0, :3] = np.nan
    keep = ~np.isnan(normal_nan.ravel())
    rho_nan, _ = rsc.pooled_spearman(normal_nan, levels[0])
    assert rho_nan == pytest.approx(stats.spearmanr(normal.ravel()[keep], levels[0].ravel()[keep]).statistic)


def test_pooled_spearman_accepts_ragged_queries():
    normal = [[0, 1, 2], [5, 4], [3, 3, 1, 0]]
    perturbed = [[0, 2, 2], [4, 5], [3, 2, 1, 1]]
    flat_n = [v for row in normal for v in row]
    flat_p = [v for row in perturbed for v in row]
    assert rsc.pooled_spearman(normal, perturbed)[0] == pytest.approx(stats.spearmanr(flat_n, flat_p).statistic)


def test_constant_input_is_nan_without_warning():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        rho, p = rsc.pooled_spearman([[2, 2], [2, 2]], [[1, 3], [0, 4]])
        assert np.isnan(rsc.per_query_spearman([[2, 2], [1, 3], [1, np.nan]], [[1, 3], [4, 4], [2, 3]])).all()
    assert math.isnan(rho) and math.isnan(p)
    assert not record


def test_weighted_spearman_equals_materialised_resample():
    normal, levels = synthetic_probe(n_queries=20, seed=4)
    normal[3, 2] = np.nan
    rng = np.random.default_rng(11)
    counts = rng.multinomial(20, np.full(20, 1 / 20), size=5)
    fast = rsc._weighted_spearman(rsc._pool(normal, levels[1]), counts)
    for row, value in zip(counts, fast, strict=True):
        idx = np.repeat(np.arange(20), row)
        expected, _ = rsc.pooled_spearman(normal[idx], levels[1][idx])
        assert value == pytest.approx(expected, abs=1e-12)


def test_per_query_spearman_matches_scipy_per_row():
    normal, levels = synthetic_probe(n_queries=15, seed=2)
    normal[0] = 3.0  # constant query -> undefined
    values = rsc.per_query_spearman(normal, levels[0])
    assert math.isnan(values[0])
    for j in range(1, 15):
        if np.ptp(levels[0][j]) == 0:
            assert math.isnan(values[j])
        else:
            assert values[j] == pytest.approx(stats.spearmanr(normal[j], levels[0][j]).statistic)


def test_per_query_summary_ignores_nan():
    normal, levels = synthetic_probe(n_queries=30, seed=5)
    normal[0] = 0.0
    summary = rsc.per_query_summary(normal, levels)
    for k in range(3):
        values = np.array(summary.values[k], dtype=float)  # None (undefined) reads as NaN
        finite = values[~np.isnan(values)]
        assert summary.mean[k] == pytest.approx(finite.mean())
        assert summary.std[k] == pytest.approx(finite.std(ddof=1))
        assert summary.n_defined[k] == len(finite) <= 29
    assert summary.mean[0] > summary.mean[1] > summary.mean[2]


# --------------------------------------------------------------------------- #
# Resampling
# --------------------------------------------------------------------------- #


def test_bootstrap_is_reproducible_and_bounded():
    normal, levels = synthetic_probe()
    a = rsc.bootstrap(normal, levels, n_resamples=200, seed=7)
    b = rsc.bootstrap(normal, levels, n_resamples=200, seed=7)
    c = rsc.bootstrap(normal, levels, n_resamples=200, seed=8)
    assert a == b
    assert a.ci != c.ci
    assert 0.0 <= a.stability <= 1.0
    assert sum(a.class_shares.values()) == pytest.approx(1.0)
    full = [rsc.pooled_spearman(normal, p)[0] for p in levels]
    for (lo, hi), rho in zip(a.ci, full, strict=True):
        assert lo <= rho <= hi


def test_bootstrap_stability_low_for_borderline_probe():
    # Levels 2 and 3 equally noisy: the order of rho_2, rho_3 is a coin flip.
    normal, levels = synthetic_probe(noise=(0.5, 3.0, 3.0), seed=1)
    result = rsc.bootstrap(normal, levels, n_resamples=300, seed=0)
    assert 0.1 < result.stability < 0.9


def test_split_half_and_subsets():
    normal, levels = synthetic_probe()
    halves = rsc.split_half(normal, levels)
    expected_first = rsc.classify([rsc.pooled_spearman(normal[:50], p[:50])[0] for p in levels])
    assert halves.first == expected_first.rsc_class
    assert halves.agree and halves.first == "quality-ordered"
    subsets = rsc.subset_stability(normal, levels, n_subsets=100, size=30, seed=0)
    assert subsets.quality_ordered + subsets.stochastic + subsets.degenerate == pytest.approx(100.0)
    assert subsets.quality_ordered > 90
    assert subsets == rsc.subset_stability(normal, levels, n_subsets=100, size=30, seed=0)
    with pytest.raises(ValueError):
        rsc.subset_stability(normal[:10], [p[:10] for p in levels], size=30)


# --------------------------------------------------------------------------- #
# Degeneracy, entropy and the whole probe
# --------------------------------------------------------------------------- #


def test_degenerate_scoring_flags_floor_and_all_equal():
    floor = np.zeros((100, 10))
    floor.flat[:20] = np.arange(20) % 5 + 1  # 98% at 0, like Llama-3.1 TriviaQA
    d = rsc.degenerate_scoring(floor)
    assert d.is_degenerate and d.floor_share == pytest.approx(0.98)
    assert rsc.degenerate_scoring(np.full((4, 3), 3.0)).is_degenerate
    assert rsc.degenerate_scoring([5, 5, 5, 5, 5, 5, 5, 5, 5, 4]).is_degenerate  # 90% at ceiling
    healthy = rsc.degenerate_scoring(synthetic_probe()[0])
    assert not healthy.is_degenerate and healthy.reason is None


def test_score_entropy_bounds_and_binning():
    assert rsc.score_entropy([2, 2, 2]) == 0.0
    assert rsc.score_entropy([0, 1, 2, 3, 4, 5]) == pytest.approx(1.0)
    assert rsc.score_entropy([0, 5]) == pytest.approx(math.log(2) / math.log(6))
    assert rsc.score_entropy([0.4, 2.5, 4.6]) == rsc.score_entropy([0, 3, 5])  # half-up rounding
    assert rsc.score_entropy([[0, 1], [7, -2]]) == rsc.score_entropy([0, 1, 5, 0])  # clipped to 0..5
    assert math.isnan(rsc.score_entropy([float("nan")]))


def test_summarize_probe_all_equal_is_degenerate_and_json_safe():
    normal = np.full((40, 10), 2.0)
    _, levels = synthetic_probe(n_queries=40)
    stats_ = rsc.summarize_probe(normal, levels, seed=0)
    assert stats_.rsc_class == "degenerate"
    assert stats_.rho is None and stats_.rho_star is None
    out = stats_.to_dict()
    json.dumps(out, allow_nan=False)
    assert out["rsc_class"] == "degenerate" and out["coupling"] is None
    assert out["degenerate"]["is_degenerate"] is True


def test_summarize_probe_constant_perturbed_level_is_degenerate():
    normal, levels = synthetic_probe(n_queries=40)
    levels[2] = np.zeros_like(levels[2])
    out = rsc.summarize_probe(normal, levels).to_dict()
    assert out["rsc_class"] == "degenerate"
    assert "random" in out["degenerate"]["reason"]
    json.dumps(out, allow_nan=False)


def test_summarize_probe_full_output():
    normal, levels = synthetic_probe()
    normal[5, 0] = np.nan  # a parse failure
    out = rsc.summarize_probe(normal, levels, seed=3, n_resamples=200).to_dict()
    text = json.dumps(out, allow_nan=False)
    assert "NaN" not in text
    assert out["rsc_class"] == "quality-ordered" and out["rho_star"] == -1.0
    assert out["coupling"] == "strong"
    assert len(out["rho"]) == len(out["p_values"]) == 3
    assert out["rho_bar"] == pytest.approx(sum(out["rho"]) / 3)
    assert len(out["per_query"]["values"]) == 3 and len(out["per_query"]["values"][0]) == 100
    assert len(out["bootstrap"]["ci"]) == 3 and 0 <= out["bootstrap"]["stability"] <= 1
    assert set(out["split_half"]) == {"first", "last"}
    assert {"quality-ordered", "stochastic"} <= set(out["subsets30"])
    assert 0 <= out["entropy"] <= 1
    assert out["n_pairs"] == 999
    assert out == rsc.summarize_probe(normal, levels, seed=3, n_resamples=200).to_dict()


def test_summarize_probe_small_probe_skips_subsets():
    normal, levels = synthetic_probe(n_queries=12)
    out = rsc.summarize_probe(normal, levels, n_resamples=50).to_dict()
    assert out["subsets30"] is None
    assert out["rsc_class"] in {"quality-ordered", "stochastic"}
    json.dumps(out, allow_nan=False)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError):
        rsc.pooled_spearman(np.zeros((3, 4)), np.zeros((3, 5)))
    with pytest.raises(ValueError):
        rsc.summarize_probe(np.zeros((3, 4)), [np.zeros((3, 4))] * 2)
