"""The Conflict Detector asked once per query (``strategy.conflict=per_query``, Appendix
N) or once per document, and what it costs per query beside Table 18's note."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from madara_cli.agents.matrix import impute
from madara_cli.agents.parsing import conflict_to_score, parse_doc_adjustments, read_conflict_reply
from madara_cli.agents.polarization import assessment_report
from madara_cli.agents.prompts import CONFLICT, detector_messages
from madara_cli.agents.requests import ADJUSTMENT_TOKENS_PER_DOC, DETECTOR_PREFIX, conflict_request
from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition import compose, ensure_loaded
from madara_cli.config.folders import shipped_prompt_set
from madara_cli.core.errors import ConfigError
from madara_cli.core.records import ChatRequest, Completion, Doc, Example
from madara_cli.data.mini import generate
from madara_cli.strategies import StrategyContext, strategy_fn
from madara_cli.strategies.assessed import assess_cell
from tests.fakes import FakeBackend

ensure_loaded()  # every plug-in registered, as composition does first

J = 2  # the detector's column


@pytest.fixture
def example() -> Example:
    docs = tuple(Doc(f"d{i}", f"Passage {i} says the capital of Varn is {'Ost' if i % 3 else 'Wel'}.", f"T{i}") for i in range(10))
    return Example("q1", "What is the capital of Varn?", ("Ost",), docs)


# --------------------------------------------------------------------------- #
# Reading the reply
# --------------------------------------------------------------------------- #


def test_one_adjustment_per_document_number():
    reply = json.dumps({"has_conflict": True, "majority_position": "Ost", "doc_adjustments": {"1": 2, "2": -2, "3": 0, "4": 1}})
    adj = parse_doc_adjustments(reply, 4)
    assert [v.value for v in adj.values] == [5.0, 0.0, 2.5, 3.75]
    assert [v.raw_value for v in adj.values] == [2, -2, 0, 1]
    assert adj.missing_ids == adj.extra_ids == 0 and all(v.ok for v in adj.values)


@pytest.mark.parametrize(
    "mapping",
    [
        '{"doc_adjustments": {"[1]": 1, "[2]": -1, "[3]": 0}}',
        '{"doc_adjustments": {"Doc 1": 1, "Doc 2": -1, "Doc 3": 0}}',
        '{"doc_adjustments": [{"doc_id": 1, "adjustment": 1}, {"doc_id": 2, "adjustment": -1}, {"doc_id": 3, "adjustment": 0}]}',
        '{"doc_adjustments": [1, -1, 0]}',  # a plain list in document order
        '```json\n{"doc_adjustments": {"1": "+1", "2": "-1", "3": "0"}}\n```',
        '{"doc_adjustments": {"1": 1, "2": -1, "3": 0',  # cut off: the pairs written are read
        "doc_adjustments: [1]: 1, [2]: -1, [3]: 0",  # not JSON at all
    ],
)
def test_the_ways_models_write_the_mapping(mapping):
    assert [v.raw_value for v in parse_doc_adjustments(mapping, 3).values] == [1, -1, 0]


def test_missing_ids_are_counted_failures_and_imputed_like_any_failed_score():
    adj = parse_doc_adjustments('{"doc_adjustments": {"1": 2, "3": -2, "12": 1}}', 4)
    assert [v.failure for v in adj.values] == [None, "missing_id", None, "missing_id"]
    assert adj.missing_ids == 2 and adj.extra_ids == 1  # "12" names no document
    column = np.array([[v.value] for v in adj.values])
    assert impute(column)[:, 0].tolist() == [5.0, 2.5, 0.0, 2.5]  # the mean of the adjustments given


def test_bad_values_are_failures_not_clipped():
    adj = parse_doc_adjustments('{"doc_adjustments": {"1": 5, "2": "strong", "3": -1}}', 3)
    assert [v.failure for v in adj.values] == ["out_of_range", "not_numeric", None]


@pytest.mark.parametrize("reply, reason", [("", "empty"), ("   ", "empty"), ("Document 2 is the odd one out.", "no_score"), ('{"adjustment": 1}', "no_score")])
def test_a_reply_without_a_mapping_fails_every_document(reply, reason):
    adj = parse_doc_adjustments(reply, 3)
    assert [v.failure for v in adj.values] == [reason] * 3 and adj.missing_ids == 0


def test_cot_reply_keeps_its_reasoning_for_every_document():
    reply = json.dumps({"reasoning_steps": ["a", "b", "c", "d", "e"], "confidence": 4, "has_conflict": False,
                        "majority_position": "Ost", "doc_adjustments": {"1": 0, "2": 0}})
    adj = parse_doc_adjustments(reply, 2)
    assert adj.reasoning == ("a", "b", "c", "d", "e") and adj.confidence == 4


def test_logprob_mode_reply_is_read_after_its_prefix():
    # The engine drops the stop string "}", so the reply ends without one.
    adj, text = read_conflict_reply(Completion(text='-1, "2": 2, "3": 0', finish_reason="stop"), 3, "logprob")
    assert text == DETECTOR_PREFIX + '-1, "2": 2, "3": 0}}'
    assert [v.raw_value for v in adj.values] == [-1, 2, 0]


# --------------------------------------------------------------------------- #
# The request
# --------------------------------------------------------------------------- #


def test_one_request_lists_every_document_under_its_number(example):
    r = conflict_request(example, example.docs, cot=False, mode="generate", max_tokens=64, temperature=0.6, seed=3)
    assert isinstance(r, ChatRequest)
    system, user = r.messages[0].content, r.messages[1].content
    assert system == shipped_prompt_set().render("detector_system") and "doc_adjustments" in system and "-2 to 2" in system
    assert user.startswith(f"Question: {example.question}")
    assert re.findall(r"^\[(\d+)\] ", user, re.M) == [str(i) for i in range(1, 11)]
    assert "documents 1 to 10" in user.splitlines()[-1]
    assert r.max_tokens == 64 + ADJUSTMENT_TOKENS_PER_DOC * 10 and r.temperature == 0.6 and r.seed == 3 and not r.prefix


def test_cot_request_asks_for_five_steps_and_confidence(example):
    r = conflict_request(example, example.docs, cot=True, mode="generate", max_tokens=256, temperature=0.6, seed=0)
    assert "reasoning_steps" in r.messages[0].content and "confidence" in r.messages[0].content
    assert r.max_tokens == 256 + ADJUSTMENT_TOKENS_PER_DOC * 10


def test_logprob_mode_generates_greedily_from_the_first_slot(example):
    r = conflict_request(example, example.docs, cot=False, mode="logprob", max_tokens=64, temperature=0.6, seed=0)
    assert r.prefix == DETECTOR_PREFIX and r.temperature == 0.0 and r.stop == ("}",)
    assert r.messages == detector_messages(example, example.docs)


def test_fever_detector_sees_a_claim():
    ex = Example("c", "Varn's capital is Ost.", ("SUPPORTS",), (Doc("d", "Ost is Varn's capital."),), "fever")
    r = conflict_request(ex, ex.docs, cot=False, mode="generate", max_tokens=64, temperature=0.6, seed=0)
    assert r.messages[1].content.startswith("Claim: ")


# --------------------------------------------------------------------------- #
# assess(): calls per query, matrices, report
# --------------------------------------------------------------------------- #


@pytest.fixture
def llm(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    yield CachedLLM(FakeBackend(), cache)
    cache.close()


def _ctx(llm, *overrides: str) -> StrategyContext:
    return StrategyContext(llm=llm, cfg=compose(["strategy=three_agent", *overrides]))


@pytest.mark.parametrize("mode, stage", [("generate", "score"), ("logprob", "score-logprob")])
def test_per_query_is_two_agents_per_document_plus_one_detector_call(llm, mode, stage):
    examples = generate(4)
    m = len(examples[0].docs)
    with llm.fresh_accounting() as acc:
        mats = assess_cell(_ctx(llm, f"strategy.scoring={mode}"), examples)
    assert acc.by_stage[stage].requests == 4 * 2 * m
    assert acc.by_stage[stage + "-conflict"].requests == 4
    for mat in mats:
        assert mat.conflict_calls == "per_query" and not mat.failed[:, J].any()
        raw = mat.raw[0][J]
        mapping = json.loads(raw)["doc_adjustments"]
        assert mat.scores[:, J].tolist() == [conflict_to_score(mapping[str(i + 1)]) for i in range(m)]
        assert len(set(mat.raw[i][J] for i in range(m))) == 1  # one reply for the whole column
    rep = assessment_report(mats, mode=mode)
    assert rep["conflict"] == {"calls": "per_query", "replies": 4 * (2 * m + 1), "missing_ids": 0, "extra_ids": 0}


def test_per_document_keeps_one_detector_call_per_document(llm):
    examples = generate(4)
    m = len(examples[0].docs)
    with llm.fresh_accounting() as acc:
        mats = assess_cell(_ctx(llm, "strategy.conflict=per_document"), examples)
    assert acc.by_stage["score"].requests == 4 * 3 * m and "score-conflict" not in acc.by_stage
    assert all(mat.conflict_calls == "per_document" for mat in mats)
    assert assessment_report(mats)["conflict"]["calls"] == "per_document"


def test_missing_ids_reach_the_cell_report(tmp_path):
    class Forgetful(FakeBackend):
        def chat(self, requests):
            return [Completion(text='{"doc_adjustments": {"1": 2, "2": -2}}') if "doc_adjustments" in r.messages[0].content else c
                    for r, c in zip(requests, super().chat(requests))]

    llm = CachedLLM(Forgetful(), ResponseCache(tmp_path / "c.sqlite"))
    examples = generate(2)
    m = len(examples[0].docs)
    mats = assess_cell(_ctx(llm), examples)
    rep = assessment_report(mats)
    assert rep["conflict"]["missing_ids"] == 2 * (m - 2)
    assert rep["failures"]["missing_id"] == 2 * (m - 2)
    assert rep["by_agent"][CONFLICT]["parse_failure_rate"] == pytest.approx((m - 2) / m)
    # Imputed as any failure: the example's mean adjustment, (5 + 0) / 2.
    assert impute(mats[0].scores)[2:, J].tolist() == [2.5] * (m - 2)


def test_bad_conflict_setting_is_a_config_error(llm):
    with pytest.raises(ConfigError, match="strategy.conflict"):
        compose(["strategy=three_agent", "strategy.conflict=sometimes"])
    ctx = _ctx(llm)
    with pytest.raises(ConfigError, match="unknown strategy.conflict 'sometimes'; valid: per_query, per_document"):
        assess_cell(ctx, generate(1), conflict="sometimes")


@pytest.mark.parametrize("name", ["three_agent", "cot", "sda", "sda_cot", "atf", "rrf", "pde", "pde_uniform"])
def test_every_assessing_strategy_asks_the_detector_once_per_query(llm, name):
    examples = generate(3)
    ctx = StrategyContext(llm=llm, cfg=compose([f"strategy={name}"]))
    with llm.fresh_accounting() as acc:
        strategy_fn(name)(ctx, examples)
    conflict = [k for k in acc.by_stage if k.endswith("-conflict")]
    assert len(conflict) == 1 and acc.by_stage[conflict[0]].requests == 3
    scoring = sum(v.requests for k, v in acc.by_stage.items() if k.startswith("score"))
    assert scoring == 3 * (2 * len(examples[0].docs) + 1)


def test_madara_carries_the_conflict_setting_to_its_treatment():
    from madara_cli.experiment.treat import routed_config

    cfg = compose(["strategy=madara", "strategy.conflict=per_document", "strategy.rank_ties=average"])
    assert routed_config(cfg, "sda").strategy.conflict == "per_document"
    assert routed_config(cfg, "sda").strategy.rank_ties == "average"
    assert routed_config(cfg, "atf").strategy.conflict == "per_document"
    assert routed_config(compose(["strategy=madara"]), "sda").strategy.conflict == "per_query"


# --------------------------------------------------------------------------- #
# Keys
# --------------------------------------------------------------------------- #


def _key(*overrides: str) -> str:
    from madara_cli.experiment.grid import cell_from_cfg

    return cell_from_cfg(compose(list(overrides))).key


def test_the_setting_moves_the_keys_of_cells_that_ask_the_detector():
    assert _key("strategy=three_agent") != _key("strategy=three_agent", "strategy.conflict=per_document")
    assert _key("strategy=pde") != _key("strategy=pde", "strategy.conflict=per_document")


def test_pde_random_asks_no_agent_so_its_key_ignores_the_setting():
    assert _key("strategy=pde_random") == _key("strategy=pde_random", "strategy.conflict=per_document")
    assert _key("strategy=pde_random", "strategy.selection=assessed") != _key(
        "strategy=pde_random", "strategy.selection=assessed", "strategy.conflict=per_document")


def test_nan_free_report_when_a_query_has_no_documents(llm):
    ex = Example("empty", "Q?", ("a",), ())
    mats = assess_cell(_ctx(llm), [ex])
    assert mats[0].m == 0 and not math.isnan(assessment_report(mats)["conflict"]["replies"])


# --------------------------------------------------------------------------- #
# madara plan: calls per query beside Table 18
# --------------------------------------------------------------------------- #


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
def test_plan_counts_3_agent_at_21_scoring_calls_per_query_beside_table_18(tmp_path):
    from madara_cli.experiment.plan import format_per_query, paper_calls_per_query, plan_grid

    def plan(*extra: str):
        cfgs = [compose([f"strategy={s}", "limit=2", f"results_dir={tmp_path}", *extra]) for s in ("three_agent", "sda")]
        return plan_grid("t", cfgs).by_strategy

    default = plan()
    for name in ("three_agent", "sda"):
        assert default[name].queries == 2
        assert default[name].per_query() == (21.0, 1.0)  # 10 + 10 + 1 scoring calls, then the answer
        assert format_per_query(default[name]) == "21 + 1"
    assert default["sda"].calls <= 2  # SDA reads 3-Agent's cached scores: at most its own answers are new
    assert paper_calls_per_query("three_agent") == "≈ 19" and paper_calls_per_query("rrf") == "—"
    assert plan("strategy.conflict=per_document")["three_agent"].per_query() == (30.0, 1.0)
