"""Selection and voting on hand-made score matrices (values worked out by hand)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from madara_cli.strategies.selection import (
    atf_select,
    atf_threshold,
    main_rag_select,
    pde_vote,
    percentile_ranks,
    rrf_fuse,
    sda_rank,
    top_k,
    weighted_aggregate,
)

NAN = math.nan


# --------------------------------------------------------------------------- #
# weighted aggregation and imputation
# --------------------------------------------------------------------------- #


def test_weighted_aggregate_uses_the_paper_weights():
    s = np.array([[5, 0, 0], [0, 5, 0], [0, 0, 5], [5, 5, 5]], dtype=float)
    assert weighted_aggregate(s, [0.4, 0.3, 0.3]).tolist() == pytest.approx([2.0, 1.5, 1.5, 5.0])


def test_weights_are_normalised():
    s = np.array([[3, 0, 0], [0, 3, 3]], dtype=float)
    assert weighted_aggregate(s, [1, 1, 1]).tolist() == pytest.approx([1.0, 2.0])
    assert weighted_aggregate(s, [4, 3, 3]).tolist() == pytest.approx(weighted_aggregate(s, [0.4, 0.3, 0.3]).tolist())


def test_failed_scores_take_the_examples_agent_mean():
    s = np.array([[4, 1, NAN], [2, NAN, 3], [NAN, 5, 5]], dtype=float)
    # column means of the valid scores: 3, 3, 4
    expected = np.array([[4, 1, 4], [2, 3, 3], [3, 5, 5]], dtype=float) @ np.array([0.4, 0.3, 0.3])
    assert weighted_aggregate(s, [0.4, 0.3, 0.3]).tolist() == pytest.approx(expected.tolist())


def test_an_agent_that_failed_everywhere_is_neutral():
    s = np.array([[4, NAN, 0], [2, NAN, 0]], dtype=float)
    assert weighted_aggregate(s, [1, 1, 1]).tolist() == pytest.approx([(4 + 2.5) / 3, (2 + 2.5) / 3])


def test_bad_weights_are_refused():
    with pytest.raises(ValueError):
        weighted_aggregate(np.zeros((2, 3)), [0.5, 0.5])
    with pytest.raises(ValueError):
        weighted_aggregate(np.zeros((2, 3)), [0, 0, 0])


def test_top_k_breaks_ties_by_retrieval_rank():
    assert top_k([1.0, 3.0, 3.0, 2.0, 3.0], 3) == [1, 2, 4]
    assert top_k([1.0, 2.0], 5) == [1, 0]


# --------------------------------------------------------------------------- #
# SDA (Algorithm 1)
# --------------------------------------------------------------------------- #


def test_percentile_ranks_average_ties():
    # sorted: 0 (rank 0), 3 3 (ranks 1,2 -> 1.5), 5 (rank 3); / (m-1) = 3
    assert percentile_ranks([3, 0, 5, 3], "average").tolist() == pytest.approx([0.5, 0.0, 1.0, 0.5])
    assert percentile_ranks([2, 2, 2], "average").tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert percentile_ranks([4], "average").tolist() == [1.0]


def test_sda_rank_by_hand():
    s = np.array(
        [
            [5, 1, 2.5],
            [5, 2, 0.0],
            [0, 3, 5.0],
            [1, 3, 2.5],
        ]
    )
    # agent 0: 0->0, 1->1/3, 5,5->2.5/3  => [5/6, 5/6, 0, 1/3]
    # agent 1: 1->0, 2->1/3, 3,3->2.5/3  => [0, 1/3, 5/6, 5/6]
    # agent 2: 0->0, 2.5,2.5->1.5/3, 5->1 => [0.5, 0, 1, 0.5]
    r = sda_rank(s, ties="average")
    expected = (np.array([5 / 6, 5 / 6, 0, 1 / 3]) + np.array([0, 1 / 3, 5 / 6, 5 / 6]) + np.array([0.5, 0, 1, 0.5])) / 3 * 5
    assert r.tolist() == pytest.approx(expected.tolist())
    assert top_k(r, 2) == [2, 3]


def test_percentile_ranks_ordinal_ties_in_order_of_appearance():
    # sorted: 0 (rank 0), then the two 3s in the order they appear (ranks 1, 2), 5 (rank 3)
    assert percentile_ranks([3, 0, 5, 3], "ordinal").tolist() == pytest.approx([1 / 3, 0.0, 1.0, 2 / 3])
    assert percentile_ranks([2, 2, 2]).tolist() == pytest.approx([0.0, 0.5, 1.0])  # ordinal is the default
    assert percentile_ranks([4], "ordinal").tolist() == [1.0]


def test_ordinal_ranks_are_the_authors_argsort_of_argsort_with_a_stable_sort():
    rng = np.random.default_rng(1)
    for _ in range(200):
        v = rng.integers(0, 6, size=10).astype(float)
        authors = np.argsort(np.argsort(v, kind="stable"), kind="stable") / 9
        assert percentile_ranks(v, "ordinal").tolist() == pytest.approx(authors.tolist())


def test_sda_rank_ordinal_by_hand():
    s = np.array([[5, 1, 2.5], [5, 2, 0.0], [0, 3, 5.0], [1, 3, 2.5]])
    # agent 0: 0->0, 1->1/3, then the 5s in order -> 2/3, 1  => [2/3, 1, 0, 1/3]
    # agent 1: 1->0, 2->1/3, then the 3s in order -> 2/3, 1  => [0, 1/3, 2/3, 1]
    # agent 2: 0->0, then the 2.5s in order -> 1/3, 2/3, 5->1 => [1/3, 0, 1, 2/3]
    r = sda_rank(s, ties="ordinal")
    expected = (np.array([2 / 3, 1, 0, 1 / 3]) + np.array([0, 1 / 3, 2 / 3, 1]) + np.array([1 / 3, 0, 1, 2 / 3])) / 3 * 5
    assert r.tolist() == pytest.approx(expected.tolist())
    assert top_k(r, 2) == [3, 2]  # average ranks keep [2, 3] (test_sda_rank_by_hand): same set here
    tied = np.array([[3, 3, 3], [3, 3, 3], [3, 3, 3]], dtype=float)
    assert top_k(sda_rank(tied, ties="ordinal"), 1) == [2]  # all tied: the last-retrieved ranks highest
    assert top_k(sda_rank(tied, ties="average"), 1) == [0]  # all tied: retrieval order decides


def test_unknown_rank_ties():
    with pytest.raises(ValueError, match="unknown rank_ties 'dense'; valid: ordinal, average"):
        percentile_ranks([1, 2], "dense")


def test_sda_is_scale_invariant_per_agent():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 6, size=(10, 3)).astype(float)
    squashed = s.copy()
    squashed[:, 1] = 4 + s[:, 1] / 5  # a polarised/compressed agent with the same order
    assert sda_rank(s).tolist() == pytest.approx(sda_rank(squashed).tolist())
    assert not np.allclose(weighted_aggregate(s), weighted_aggregate(squashed))


def test_sda_weights():
    s = np.array([[5, 0, 0], [0, 5, 5]], dtype=float)
    assert sda_rank(s, [1, 0, 0]).tolist() == pytest.approx([5.0, 0.0])
    assert sda_rank(s).tolist() == pytest.approx([5 / 3, 10 / 3])


# --------------------------------------------------------------------------- #
# ATF (Section 4.3)
# --------------------------------------------------------------------------- #


def test_atf_keeps_scores_above_mu_minus_half_sigma():
    s = [4.0, 1.0, 3.0, 0.0, 2.0]  # mu = 2, sigma = sqrt(2) -> tau = 1.293
    assert atf_threshold(s) == pytest.approx(2 - 0.5 * math.sqrt(2))
    assert atf_select(s, kappa=0.5, min_keep=2, max_keep=5) == [0, 2, 4]
    # population sigma: tau = 0.908 drops the 0.9 (the sample sigma would give 0.782 and keep it)
    assert atf_select([4.0, 0.9, 3.0, 0.0, 2.0], kappa=0.75, min_keep=2, max_keep=5) == [0, 2, 4]


def test_atf_keeps_at_least_two():
    # mu = 5/3, sigma = 2.357 -> tau = 0.49: only the first document passes
    assert atf_select([5.0, 0.0, 0.0], kappa=0.5, min_keep=2, max_keep=5) == [0, 1]
    assert atf_select([5.0, 0.0, 0.0], kappa=0.5, min_keep=1, max_keep=5) == [0]
    # one outlier far above: mu = 1.0, sigma = 2.0, tau(kappa=-1) = 3 keeps one doc
    s = [5.0, 0.0, 0.0, 0.0, 0.0]
    assert atf_select(s, kappa=-0.9, min_keep=2, max_keep=5) == [0, 1]
    assert atf_select(s, kappa=-0.9, min_keep=1, max_keep=5) == [0]


def test_atf_keeps_at_most_k():
    s = [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 0.0]  # six tied above tau
    assert atf_select(s, kappa=0.5, min_keep=2, max_keep=5) == [0, 1, 2, 3, 4]


def test_atf_constant_scores_keep_everything_up_to_k():
    assert atf_select([0.1] * 10, max_keep=5) == [0, 1, 2, 3, 4]


def test_atf_fewer_documents_than_the_minimum():
    assert atf_select([1.0], min_keep=2) == [0]
    assert atf_select([], min_keep=2) == []


# --------------------------------------------------------------------------- #
# RRF (Appendix C)
# --------------------------------------------------------------------------- #


def test_rrf_by_hand():
    s = np.array([[5, 1, 0], [3, 4, 2], [1, 5, 1]], dtype=float)
    # ranks (1 = best): agent0 [1,2,3], agent1 [3,2,1], agent2 [3,1,2]
    k = 60
    expected = [1 / 61 + 1 / 63 + 1 / 63, 1 / 62 + 1 / 62 + 1 / 61, 1 / 63 + 1 / 61 + 1 / 62]
    assert rrf_fuse(s, k=k).tolist() == pytest.approx(expected)
    assert top_k(rrf_fuse(s, k=k), 3) == [1, 2, 0]


def test_rrf_ties_share_the_average_rank():
    s = np.array([[5.0], [5.0], [1.0]])
    assert rrf_fuse(s, k=60).tolist() == pytest.approx([1 / 61.5, 1 / 61.5, 1 / 63])


def test_rrf_uniform_weights_are_the_unweighted_sum():
    s = np.random.default_rng(1).integers(0, 6, size=(6, 3)).astype(float)
    assert rrf_fuse(s, weights=[1, 1, 1]).tolist() == pytest.approx(rrf_fuse(s).tolist())


# --------------------------------------------------------------------------- #
# PDE vote (Section 4.4)
# --------------------------------------------------------------------------- #


def test_pde_score_weighted_vote_beats_the_majority():
    answers = ["Paris", "Lyon", "Lyon", "paris."]
    weights = [4.5, 1.0, 1.5, 0.5]  # Paris 5.0 vs Lyon 2.5
    vote = pde_vote(answers, weights)
    assert vote.answer == "Paris" and vote.winner == 0
    assert vote.totals == pytest.approx({"paris": 5.0, "lyon": 2.5})
    assert vote.sizes == {"paris": 2, "lyon": 2}
    assert pde_vote(answers).answer == "Paris"  # uniform: 2 vs 2, Paris holds rank 1


def test_pde_uniform_vote_is_a_majority():
    assert pde_vote(["P", "Q", "Q"]).answer == "Q"


def test_pde_tie_goes_to_the_larger_group_then_the_higher_rank():
    # equal totals 3.0: "x" has two members, "y" one
    assert pde_vote(["y", "x", "x"], [3.0, 1.5, 1.5]).answer == "x"
    # equal totals and sizes: the group holding the higher-ranked document wins
    assert pde_vote(["q", "p", "p", "q"], [1, 1, 1, 1]).answer == "q"
    assert pde_vote(["p", "q"], [2.0, 2.0]).answer == "p"


def test_pde_groups_by_normalised_answer_and_skips_empty():
    vote = pde_vote(["", "The Beatles", "beatles", ""], [5.0, 1.0, 1.0, 5.0])
    assert vote.answer == "The Beatles" and vote.totals == {"beatles": 2.0}
    assert pde_vote(["", ""]).answer == ""
    assert pde_vote([]).winner is None


def test_pde_vote_over_fever_labels():
    assert pde_vote(["SUPPORTS", "REFUTES", "REFUTES"], [4.0, 1.0, 1.0]).answer == "SUPPORTS"


# --------------------------------------------------------------------------- #
# MAIN-RAG adaptive threshold
# --------------------------------------------------------------------------- #


def test_main_rag_keeps_docs_above_the_mean_descending():
    s = [2.0, -1.0, 5.0, 0.0, 4.0]  # mean 2.0
    assert main_rag_select(s, n=0) == [2, 4, 0]


def test_main_rag_n_sigma_loosens_the_threshold():
    s = [2.0, -1.0, 5.0, 0.0, 4.0]  # sigma = sqrt(5.2) = 2.28 -> tau = -0.28
    assert main_rag_select(s, n=1) == [2, 4, 0, 3]
    assert main_rag_select(s, n=2) == [2, 4, 0, 3, 1]
    # population sigma: tau = 2 - 1.2 * 2.280 = -0.74 drops the -1.0 document
    # (the sample sigma 2.550 would give -1.06 and keep it)
    assert main_rag_select(s, n=1.2) == [2, 4, 0, 3]


def test_main_rag_nan_scores_are_dropped():
    assert main_rag_select([1.0, NAN, 3.0]) == [2]
    assert main_rag_select([NAN, NAN]) == [0, 1]


def test_main_rag_judge_score_is_yes_minus_no():
    from madara_cli.core.records import Completion
    from madara_cli.strategies.main_rag import LOGPROB_FLOOR, judge_score

    assert judge_score(Completion(text="", logprobs={"Yes": -0.1, "No": -2.4})) == pytest.approx(2.3)
    assert judge_score(Completion(text="", logprobs={"Yes": -3.0, "No": -0.05})) == pytest.approx(-2.95)
    assert judge_score(Completion(text="", logprobs={"Yes": -math.inf, "No": -1.0})) == pytest.approx(LOGPROB_FLOOR + 1.0)
    assert math.isnan(judge_score(Completion(text="", logprobs={"Yes": -math.inf, "No": -math.inf})))
