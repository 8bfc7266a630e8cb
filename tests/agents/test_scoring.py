"""Agent prompts, score parsing, the conflict mapping, logprob scores and the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from madara_cli.agents import prompts
from madara_cli.agents.matrix import ScoreMatrix, build_matrix, impute
from madara_cli.agents.parsing import conflict_to_score, expected_score, parse_score
from madara_cli.agents.polarization import assessment_report
from madara_cli.agents.requests import DIGITS, LOGPROB_PREFIX, score_requests
from madara_cli.config.folders import shipped_prompt_set
from madara_cli.core.records import ChatRequest, Completion, Doc, Example, ScoreRequest
from madara_cli.data.mini import generate

SHIPPED = shipped_prompt_set()

# --------------------------------------------------------------------------- #
# parsing
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "text, value",
    [
        ('{"score": 4}', 4.0),
        ('{"score":0}', 0.0),
        ('{"score": 3.5}', 3.5),
        ('{"score": "2"}', 2.0),
        ('```json\n{"score": 3}\n```', 3.0),
        ('```\n{\n  "score": 5\n}\n```\nThe document states the answer.', 5.0),
        ('Here is my assessment: {"score": 1} -- it is off topic.', 1.0),
        ('{"note": "x"} {"score": 2}', 2.0),  # the first object holding the key
    ],
)
def test_json_scores(text, value):
    p = parse_score(text, "relevance")
    assert p.ok and p.value == value and p.method == "json"


def test_cot_json_with_reasoning_steps():
    text = json.dumps({"reasoning_steps": ["entities: X", "X is mentioned", "direct evidence", "timely", "so 4"], "confidence": 4, "score": 4})
    p = parse_score(text, "consistency")
    assert p.value == 4.0 and p.confidence == 4
    assert p.reasoning == ("entities: X", "X is mentioned", "direct evidence", "timely", "so 4")


def test_cot_reply_cut_before_its_closing_brace():
    # The generation stops at "}" (the stop string is dropped by the engine).
    p = parse_score('{"reasoning_steps": ["a", "b"], "confidence": 2, "score": 1', "relevance")
    assert p.ok and p.value == 1.0 and p.method == "regex" and p.reasoning == ("a", "b") and p.confidence == 2


def test_cot_reply_cut_before_the_score_is_a_failure_that_keeps_the_reasoning():
    p = parse_score('{"reasoning_steps": ["first step", "second', "relevance")
    assert not p.ok and p.failure == "no_score" and p.reasoning == ("first step",)


def test_out_of_range_confidence_is_dropped_not_fatal():
    p = parse_score('{"reasoning_steps": [], "confidence": 9, "score": 2}', "relevance")
    assert p.ok and p.confidence is None


@pytest.mark.parametrize(
    "text, value",
    [
        ("{'score': 3}", 3.0),  # single quotes: not JSON
        ('{"score": 2,}', 2.0),  # trailing comma
        ("Score: 4", 4.0),
        ("score = 1", 1.0),
    ],
)
def test_regex_fallback(text, value):
    p = parse_score(text, "relevance")
    assert p.ok and p.value == value and p.method == "regex"


@pytest.mark.parametrize("text, value", [("4", 4.0), (' "3". ', 3.0), ("`5`", 5.0), ("I would give it 2/5.", 2.0), ("3 out of 5", 3.0)])
def test_lone_number_fallback(text, value):
    p = parse_score(text, "relevance")
    assert p.ok and p.value == value and p.method == "lone"


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("This document is highly relevant.", "no_score"),
        ("Document [3] mentions the city twice.", "no_score"),  # a number in prose is not a score
        ("It is 3 or 4.", "no_score"),
        ("%%%{{{garbage", "no_score"),
        ('{"score": "high"}', "not_numeric"),
        ('{"score": null}', "not_numeric"),
        ('{"score": 7}', "out_of_range"),
        ('{"score": -1}', "out_of_range"),
        ("10", "out_of_range"),
    ],
)
def test_failures_are_counted_not_clipped(text, reason):
    p = parse_score(text, "relevance")
    assert not p.ok and p.failure == reason and math.isnan(p.value)


def test_conflict_detector_reads_adjustments():
    assert parse_score('{"adjustment": -2}', "conflict").value == 0.0
    assert parse_score('{"adjustment": 0}', "conflict").value == 2.5
    assert parse_score('{"adjustment": 1}', "conflict").value == 3.75
    assert parse_score('{"adjustment": 2}', "conflict").value == 5.0
    assert parse_score("+1", "conflict").value == 3.75
    assert parse_score('{"adjustment": 3}', "conflict").failure == "out_of_range"
    # the conflict detector's field is "adjustment"; a 0-5 "score" is not read as one
    assert parse_score('{"score": 4}', "conflict").failure == "no_score"


def test_conflict_mapping():
    assert [conflict_to_score(a) for a in (-2, -1, 0, 1, 2)] == [0.0, 1.25, 2.5, 3.75, 5.0]


def test_unknown_agent():
    with pytest.raises(ValueError):
        parse_score("{}", "judge")


# --------------------------------------------------------------------------- #
# logprob scores
# --------------------------------------------------------------------------- #


def test_expected_score_renormalises_over_candidates():
    lp = {c: math.log(p) for c, p in zip(DIGITS, (0.0 + 1e-300, 0.1, 0.1, 0.2, 0.1, 0.0 + 1e-300))}
    # renormalised over mass 0.5: p = (0, .2, .2, .4, .2, 0) -> 0.2 + 0.4 + 1.2 + 0.8 = 2.6
    assert expected_score(lp) == pytest.approx(2.6)


def test_expected_score_all_mass_on_one_digit_and_missing_candidates():
    assert expected_score({"5": -0.01, "0": -math.inf}) == pytest.approx(5.0)
    assert expected_score({c: -1.0 for c in DIGITS}) == pytest.approx(2.5)
    assert math.isnan(expected_score({c: -math.inf for c in DIGITS}))
    assert math.isnan(expected_score(None))


# --------------------------------------------------------------------------- #
# requests and the matrix
# --------------------------------------------------------------------------- #


@pytest.fixture
def example():
    return generate(2)[0]


def test_requests_are_document_major_and_strategy_free(example):
    reqs = score_requests(example, cot=False, mode="generate", max_tokens=160, temperature=0.6, seed=0)
    assert len(reqs) == 10 * 3 and all(isinstance(r, ChatRequest) for r in reqs)
    assert reqs[0].messages[0].content == SHIPPED.render("relevance_system")
    assert reqs[1].messages[0].content == SHIPPED.render("consistency_system")
    assert reqs[5].messages[0].content == SHIPPED.render("conflict_system")
    again = score_requests(example, cot=False, mode="generate", max_tokens=160, temperature=0.6, seed=0)
    assert reqs == again  # byte-identical: the cache shares them between strategies
    seeded = score_requests(example, cot=False, mode="generate", max_tokens=160, temperature=0.6, seed=7)
    assert {r.seed for r in seeded} == {7}  # the cell seed itself, never a per-strategy one


def test_relevance_sees_one_document_the_others_see_excerpts(example):
    reqs = score_requests(example, cot=False, mode="generate", max_tokens=160, temperature=0.6, seed=0)
    rel, con = reqs[0].messages[1].content, reqs[1].messages[1].content
    assert example.docs[0].text in rel and example.docs[1].text[:40] not in rel
    assert example.docs[0].text in con and "Other retrieved documents" in con
    assert all(f"[{j + 1}] " in con for j in range(1, 10))


def test_excerpts_are_short():
    doc = Doc(id="d", text="word " * 300)
    ex = prompts.excerpt(doc)
    assert len(ex) <= prompts.EXCERPT_CHARS + 4 and ex.endswith("...")
    assert prompts.excerpt(Doc(id="e", text="short text")) == "short text"


def test_cot_prompts_ask_for_steps_and_confidence(example):
    reqs = score_requests(example, cot=True, mode="generate", max_tokens=384, temperature=0.6, seed=0)
    for agent, r in zip(prompts.AGENTS, reqs):
        system = r.messages[0].content
        assert system == SHIPPED.render(f"{agent}_cot_system")
        assert "reasoning_steps" in system and "confidence" in system
        assert all(f"{i}. " in system for i in range(1, 6))


def test_logprob_requests(example):
    reqs = score_requests(example, cot=False, mode="logprob", max_tokens=1, temperature=0.6, seed=0)
    assert all(isinstance(r, ScoreRequest) and r.candidates == DIGITS and r.prefix == LOGPROB_PREFIX for r in reqs)
    assert reqs[2].messages[0].content == SHIPPED.render("conflict_logprob_system")
    with pytest.raises(ValueError):
        score_requests(example, cot=True, mode="logprob", max_tokens=1, temperature=0.6, seed=0)


def test_fever_prompts_say_claim():
    ex = Example(id="f", question="The sky is green.", answers=("REFUTES",), docs=(Doc(id="a", text="The sky is blue."),), task="fever")
    reqs = score_requests(ex, cot=False, mode="generate", max_tokens=10, temperature=0.6, seed=0)
    assert reqs[0].messages[1].content.startswith("Claim: The sky is green.")


def _matrix(texts, example):
    outs = [Completion(text=t, finish_reason="stop") for t in texts]
    return build_matrix(example, outs, "generate")


def test_build_matrix_restores_the_stop_brace_and_keeps_failures(example):
    texts = ['{"score": 4', '{"score": 2', '{"adjustment": -2'] + ["nonsense"] * 27
    m = _matrix(texts, example)
    assert m.scores.shape == (10, 3)
    assert m.scores[0].tolist() == [4.0, 2.0, 0.0]
    assert m.raw[0][0] == '{"score": 4}'
    assert m.failed[1:].all() and not m.failed[0].any()
    assert m.failure_reasons[1][0] == "no_score"
    filled = m.imputed()
    assert filled[5].tolist() == [4.0, 2.0, 0.0]  # each agent's mean over the valid documents


def test_impute():
    s = np.array([[1.0, math.nan], [3.0, math.nan]])
    assert impute(s).tolist() == [[1.0, 2.5], [3.0, 2.5]]


def test_report_counts_failures_and_extremes(example):
    texts = ['{"score": 5}', '{"score": 0}', '{"adjustment": 0}', "", '{"score": 9}', '{"adjustment": 2}'] + ['{"score": 3}', '{"score": 3}', '{"adjustment": 1}'] * 8
    m = _matrix(texts, example)
    rep = assessment_report([m])
    assert rep["n_scores"] == 30 and rep["n_valid"] == 28
    assert rep["parse_failure_rate"] == pytest.approx(2 / 30)
    # valid extremes: 5, 0 (row 0) and +2 -> 5 (row 1): 3 of 28
    assert rep["extreme_score_rate"] == pytest.approx(3 / 28)
    assert rep["failures"] == {"empty": 1, "out_of_range": 1}
    assert rep["by_agent"]["relevance"]["parse_failure_rate"] == pytest.approx(1 / 10)
    json.dumps(rep, allow_nan=False)


def test_report_when_everything_failed(example):
    rep = assessment_report([_matrix(["?"] * 30, example)])
    assert rep["parse_failure_rate"] == 1.0 and rep["mean_score"] is None and rep["extreme_score_rate"] is None
    json.dumps(rep, allow_nan=False)


def test_score_matrix_to_json(example):
    m = _matrix(['{"score": 4'] + ["x"] * 29, example)
    assert isinstance(m, ScoreMatrix)
    assert m.to_json()[0] == [4.0, None, None]


def test_agent_request_is_the_strategies_request(example):
    from madara_cli.agents.requests import SCORE_STOP, agent_request

    reqs = score_requests(example, cot=True, mode="generate", max_tokens=384, temperature=0.6, seed=2)
    one = agent_request(example, example.docs, 4, "consistency", cot=True, mode="generate", max_tokens=384, temperature=0.6, seed=2)
    assert one == reqs[4 * 3 + 1] and one.stop == ()  # CoT replies run to their end
    base = agent_request(example, example.docs, 0, "relevance", cot=False, mode="generate", max_tokens=16, temperature=0.6, seed=2)
    assert base.stop == SCORE_STOP
    with pytest.raises(ValueError, match="unknown strategy.scoring"):
        score_requests(example, cot=False, mode="sample", max_tokens=1, temperature=0.6, seed=0)


def test_parse_completion_restores_the_stop_brace():
    from madara_cli.agents.parsing import parse_completion

    p = parse_completion(Completion(text='{"reasoning_steps": ["a"], "confidence": 3, "score": 4', finish_reason="stop"), "relevance")
    assert p.value == 4.0 and p.method == "json" and p.reasoning == ("a",)
    # cut by the token limit: no brace is invented, the regex still finds the score
    p = parse_completion(Completion(text='{"score": 2', finish_reason="length"), "relevance")
    assert p.value == 2.0 and p.method == "regex"
    p = parse_completion(Completion(text="", logprobs={"5": 0.0}), "relevance", mode="logprob")
    assert p.value == 5.0


def test_rescore_request_is_the_normal_request_plus_the_chain(example):
    """Appendix F.1: the perturbed chain is presented as-is to the same scoring prompt."""
    from madara_cli.agents.parsing import read_rescore
    from madara_cli.agents.requests import agent_request, rescore_request

    normal = agent_request(example, example.docs, 2, "relevance", cot=True, mode="generate", max_tokens=256, temperature=0.6, seed=3)
    steps = ["Second sentence.", "First sentence, with \"quotes\"."]
    gen = rescore_request(normal, steps, mode="generate", max_tokens=64, confidence=4)
    assert gen.messages == normal.messages  # same system prompt, same user turn
    assert (gen.temperature, gen.top_p, gen.seed) == (normal.temperature, normal.top_p, normal.seed)
    assert gen.prefix == '{"reasoning_steps": ["Second sentence.", "First sentence, with \\"quotes\\"."], "confidence": '
    assert json.loads(gen.prefix + '4, "score": 2}')["reasoning_steps"] == steps  # the chain, verbatim
    lp = rescore_request(normal, steps, mode="logprob", max_tokens=64, confidence=4)
    assert isinstance(lp, ScoreRequest) and lp.messages == normal.messages
    assert lp.prefix.endswith('"confidence": 4, "score": ') and lp.candidates == tuple("012345")
    no_conf = rescore_request(normal, steps, mode="logprob", max_tokens=64).prefix
    assert '"confidence"' not in no_conf and no_conf.endswith('."], "score": ')
    # Only the continuation is read: a score mentioned inside the chain never counts.
    p = read_rescore(Completion(text='2, "score": 1', finish_reason="stop"))
    assert (p.value, p.confidence, p.ok) == (1.0, 2, True)
    assert not read_rescore(Completion(text="I think so", finish_reason="stop")).ok
    with pytest.raises(ValueError, match="valid: generate, logprob"):
        rescore_request(normal, steps, mode="bogus", max_tokens=64)


def test_a_score_replys_logprobs_read_as_before_and_kept_by_exact_value():
    """The read of a score request's log-probabilities is kept by each value's repr: a kept
    read is the one computing gives, and 0, 0.0 and -0.0 (one value, three JSON texts) are
    kept apart; NaN and -inf read as no mass."""
    import json
    import math

    import numpy as np

    from madara_cli.agents import parsing
    from madara_cli.agents.parsing import DIGITS, expected_score, read_reply
    from madara_cli.core.records import Completion

    parsing._read_logprobs.cache_clear()
    for lp in ({"0": -2.0, "1": -0.5, "5": -1.25}, {"0": 0, "1": -3.0}, {"0": 0.0, "1": -3.0}, {"0": -0.0, "1": -3.0},
               {"0": -math.inf, "1": math.nan}, {"3": -0.000049, "4": -7.1234567}):
        for _ in range(2):  # computed, then kept
            parsed, raw = read_reply(Completion(text="", logprobs=dict(lp)), "relevance", "logprob")
            want = expected_score(lp, DIGITS)
            assert (math.isnan(parsed.value) and math.isnan(want)) or parsed.value == want
            assert raw == json.dumps({c: (None if not math.isfinite(v) else round(v, 4)) for c, v in lp.items()})
            assert parsed.failure == ("no_mass" if math.isnan(want) else None)
    assert parsing._read_logprobs.cache_info().currsize == 6  # 0, 0.0 and -0.0 apart
    kept = parsing._read_logprobs.cache_info().maxsize
    for _ in range(kept + 3):
        read_reply(Completion(text="", logprobs={"0": -float(_)}), "relevance", "logprob")
    assert parsing._read_logprobs.cache_info().currsize <= kept
    assert np.isfinite(read_reply(Completion(text="", logprobs={"2": -1.0}), "relevance", "logprob")[0].value)


def test_the_extreme_score_test_is_numpys_isclose():
    """polarization's 0-or-5 test is np.isclose at its default tolerances, value for value,
    at the tolerance's edges, signed zeros, NaN and infinities included."""
    from madara_cli.agents.polarization import _near

    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, 5.0, 5.00004, 5.00005, 5.0000500001, 4.99995, 1e-8, 1.1e-8, -1e-8, np.nan, np.inf, -np.inf]
    values = np.concatenate([rng.uniform(-1, 6, 20_000), edges, 5 + rng.normal(0, 3e-5, 20_000), rng.normal(0, 2e-8, 20_000)])
    for target in (0.0, 5.0):
        assert (np.isclose(values, target) == _near(values, target)).all()
