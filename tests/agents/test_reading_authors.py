"""``reading=authors``: each family where the authors' reference code (js-lee-AI/MADARA)
reads replies differently from the paper's reading, pinned on the inputs that tell the
two apart. The expectations are worked out by hand from what their code does; the
paper's reading is asserted beside each, so a test fails if either side drifts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from madara_cli.agents.generator import clean_answer
from madara_cli.agents.parsing import parse_score, parse_score_authors, reading_parsers
from madara_cli.agents.prompts import AGENTS, CONFLICT
from madara_cli.agents.requests import SCORE_STOP
from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition import compose, ensure_loaded
from madara_cli.composition.plugins import load_plugins
from madara_cli.config.identity import identify, identify_probe
from madara_cli.core import metrics as M
from madara_cli.core.errors import ConfigError
from madara_cli.data.mini import generate
from madara_cli.diagnose import perturb, rsc
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.strategies import StrategyContext
from madara_cli.strategies.assessed import assess_cell
from madara_cli.strategies.selection import pde_vote, pde_vote_authors
from tests.fakes import FakeBackend

load_plugins()
ensure_loaded()  # every plug-in registered, as composition does first


class Recording(FakeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def chat(self, requests):
        self.seen.extend(requests)
        return super().chat(requests)


@pytest.fixture
def backend(tmp_path):
    b = Recording()
    cache = ResponseCache(tmp_path / "cache.sqlite")
    yield b, CachedLLM(b, cache)
    cache.close()


# --------------------------------------------------------------------------- #
# The preset and the key
# --------------------------------------------------------------------------- #


def test_preset_sets_every_family_and_the_authors_budgets():
    cfg = compose(["reading=authors"])
    r = cfg.reading
    assert (r.name, r.conflict, r.score_parser, r.contradiction, r.answers, r.pde_grouping) == (
        "authors", "score_field", "authors", "authors", "strip", "authors")
    assert (r.shuffle, r.undefined_rho, r.empty_chain, r.chain_source, r.requests) == (
        "may_repeat", "zero", "placeholder", "field", "authors")
    g = cfg.generation
    assert (g.max_tokens, g.score_max_tokens, g.cot_max_tokens, g.rescore_max_tokens) == (64, 512, 512, 256)


def test_paper_reading_moves_no_key_and_authors_has_its_own():
    plain = cell_from_cfg(compose(["strategy=three_agent"])).config_hash
    assert cell_from_cfg(compose(["strategy=three_agent", "reading=paper"])).config_hash == plain
    authors = cell_from_cfg(compose(["strategy=three_agent", "reading=authors"])).config_hash
    one = cell_from_cfg(compose(["strategy=three_agent", "reading.score_parser=authors"])).config_hash
    assert len({plain, authors, one}) == 3
    row = (lambda c: identify(c).settings(c))(compose(["strategy=three_agent", "reading=authors"]))
    assert row["reading.name"] == "authors" and row["reading.score_parser"] == "authors"
    assert not any(k.startswith("reading.") for k in (lambda c: identify(c).settings(c))(compose(["strategy=three_agent"])))


def test_probe_key_moves_only_off_the_paper_reading():
    from madara_cli.config.identity import identify_probe

    plain = identify_probe(compose([])).config_hash
    assert identify_probe(compose(["reading=paper"])).config_hash == plain
    assert identify_probe(compose(["reading=authors"])).config_hash != plain


@pytest.mark.parametrize("override", ["reading=bogus", "reading.score_parser=bogus"])
def test_bad_reading_is_one_line(override):
    with pytest.raises(ConfigError) as err:
        compose([override])
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- #
# 1. Conflict Detector: asked per document, its reply read as a "score"
# --------------------------------------------------------------------------- #


def test_detector_reply_is_read_as_a_score_field_or_its_first_digit():
    assert reading_parsers({"conflict": "score_field"}) == tuple("authors" if a == CONFLICT else "madara" for a in AGENTS)
    # their format has no "score": the first digit 0-5 of the reply, here a document id
    assert parse_score_authors(json.dumps({"has_conflict": True, "doc_adjustments": {"3": -2}})).value == 3.0
    # a digit above 5 is skipped: the adjustment's 2 is the first one in range
    assert parse_score_authors('{"doc_adjustments": {"7": 2}}').value == 2.0
    # no braces at all: 0 (even with digits in the text)
    assert parse_score_authors("Document 4 (2019) is outdated.").value == 0.0
    # madara's reading of the same object: the adjustment -2 -> 0 on the 0-5 scale
    assert parse_score('{"adjustment": -2}', CONFLICT).value == 0.0


def test_authors_detector_is_asked_per_document(backend):
    b, llm = backend
    examples = generate(2)
    m = len(examples[0].docs)
    with llm.fresh_accounting() as acc:
        mats = assess_cell(StrategyContext(llm=llm, cfg=compose(["strategy=three_agent", "reading=authors"])), examples)
    assert acc.by_stage["score"].requests == 2 * 3 * m and "score-conflict" not in acc.by_stage
    col = np.concatenate([mat.scores[:, 2] for mat in mats])
    assert not np.isnan(col).any() and set(col.tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    assert not any(mat.failed.any() for mat in mats)  # the authors' parser never fails


# --------------------------------------------------------------------------- #
# 2. Level-2 contradiction
# --------------------------------------------------------------------------- #


def test_authors_contradiction_is_one_way_substring_and_case_sensitive():
    text = "The passage is relevant, irrelevant to none; Relevant and inconsistent; it contradicts; score of 4."
    assert perturb.contradict_text_authors(text) == (
        "The passage is irrelevant, irirrelevant to none; Relevant and ininconsistent; it contradicts; score of 4.")
    # the paper's list: whole words, both ways, case kept, the score inverted
    assert perturb.contradict_text("relevant, irrelevant, Relevant, score of 4") == "irrelevant, relevant, Irrelevant, score of 1"


def test_authors_contradiction_reaches_the_probe_levels():
    chains = [["It is relevant."], ["It is irrelevant."]]
    paper = perturb.perturb_chains([chains], seed=0).contradicted[0]
    authors = perturb.perturb_chains([chains], seed=0, contradiction="authors").contradicted[0]
    assert paper == [["It is irrelevant."], ["It is relevant."]]
    assert authors == [["It is irrelevant."], ["It is irirrelevant."]]


# --------------------------------------------------------------------------- #
# 3. Answer clean-up and FEVER labels
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("reply", ["Answer: Paris", "The answer is Paris.", "Paris\nIt is the capital named in document 2."])
def test_stripped_answers_score_as_written(reply):
    assert M.score(clean_answer(reply), ["Paris"]).em == 1.0
    stripped = clean_answer(reply, reading="strip")
    assert stripped == reply.strip()
    assert M.score(stripped, ["Paris"], tidy=False).em == 0.0


def test_fever_label_is_not_read_from_the_reply():
    reply = "Label: REFUTES\nThe documents say otherwise."
    assert clean_answer(reply, "fever") == "REFUTES"
    assert clean_answer(reply, "fever", "strip") == reply
    assert M.score(clean_answer(reply, "fever", "strip"), ["REFUTES"], tidy=False).em == 0.0
    assert M.score(clean_answer(" SUPPORTS. ", "fever", "strip"), ["SUPPORTS"], tidy=False).em == 1.0


# --------------------------------------------------------------------------- #
# 4. Score parsing
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "reply, authors, madara",
    [
        ("Score: 4", 0.0, 4.0),
        ("4", 0.0, 4.0),
        ('{"score": 7}', 5.0, math.nan),
        ('{"score": -1}', 0.0, math.nan),
        ('{"score": 4.5}', 4.0, 4.5),
        ('{"score": "high"} see document 3', 3.0, math.nan),
        ("{score: 2, reason: none}", 2.0, 2.0),
    ],
)
def test_authors_score_parser(reply, authors, madara):
    assert parse_score_authors(reply).value == authors
    got = parse_score(reply, "relevance").value
    assert (math.isnan(got) and math.isnan(madara)) or got == madara


# --------------------------------------------------------------------------- #
# 5. PDE vote
# --------------------------------------------------------------------------- #


def test_authors_grouping_keeps_articles_and_returns_the_last_member():
    answers = ["The Beatles", "Beatles", "the beatles"]
    a = pde_vote_authors(answers, [1.0, 1.0, 1.0])
    assert a.totals == {"the beatles": 2.0, "beatles": 1.0} and (a.winner, a.answer) == (2, "the beatles")
    m = pde_vote(answers, [1.0, 1.0, 1.0])
    assert len(m.totals) == 1 and (m.winner, m.answer) == (0, "The Beatles")


def test_authors_empty_answer_can_win():
    assert pde_vote_authors(["", "", "Paris"], [1.0, 1.0, 1.5]).answer == ""
    assert pde_vote(["", "", "Paris"], [1.0, 1.0, 1.5]).answer == "Paris"


def test_authors_exact_tie_goes_to_the_first_group():
    assert pde_vote_authors(["Ost", "Wel", "Wel"], [2.0, 1.0, 1.0]).answer == "Ost"
    assert pde_vote(["Ost", "Wel", "Wel"], [2.0, 1.0, 1.0]).answer == "Wel"  # madara: the larger group


# --------------------------------------------------------------------------- #
# 6. Probe edge rules
# --------------------------------------------------------------------------- #


def test_plain_shuffle_may_leave_a_chain_unchanged():
    chain = ["First step.", "Second step."]
    same = sum(perturb.shuffled_sentences(chain, (s, 0, 0), may_repeat=True) == chain for s in range(200))
    assert 60 < same < 140  # about half of the 2-sentence chains
    assert all(perturb.shuffled_sentences(chain, (s, 0, 0)) != chain for s in range(200))


def _scores(seed: int) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [[float(v) for v in rng.integers(0, 6, size=5)] for _ in range(12)]


def test_undefined_rho_counts_as_zero():
    normal = _scores(1)
    constant = [[3.0] * 5 for _ in range(12)]
    levels = [normal, constant, _scores(2)]
    assert rsc.summarize_probe(normal, levels, n_resamples=20).rsc_class == rsc.DEGENERATE
    stats = rsc.summarize_probe(normal, levels, n_resamples=20, undefined_rho="zero")
    assert stats.rsc_class != rsc.DEGENERATE and stats.rho[1] == 0.0 and stats.rho[0] == pytest.approx(1.0)


def test_empty_chain_is_rescored_from_a_donor():
    chains = [[["A is so.", "B is so."], [], ["C is so."]]]
    dropped = perturb.perturb_chains(chains, seed=0).random[0]
    kept = perturb.perturb_chains(chains, seed=0, empty_chain="placeholder").random[0]
    assert dropped[1] == [] and kept[1] in (["A is so.", "B is so."], ["C is so."])
    assert kept[0] == ["C is so."] and kept[2] == ["A is so.", "B is so."]


def test_reasoning_field_value_is_the_chain():
    reply = '{"score": 4, "reasoning": "The passage is relevant. It names Paris!"}'
    assert perturb.chain_from_field(reply) == ["The passage is relevant.", "It names Paris!"]
    assert "reasoning" in perturb.chain_from_text(reply)  # madara: the key text stays in the chain
    assert perturb.chain_from_field('{"score": 4}') == []
    assert perturb.chain_from_field("It seems relevant. Score 4") == []  # no object: no chain
    assert perturb.chain_from_field("{not json} It seems relevant.") == ["{not json} It seems relevant."]


# --------------------------------------------------------------------------- #
# 7. Request shapes and budgets
# --------------------------------------------------------------------------- #


def test_authors_requests_have_no_stop_and_their_budget(backend):
    b, llm = backend
    assess_cell(StrategyContext(llm=llm, cfg=compose(["strategy=three_agent", "reading=authors"])), generate(1))
    assert b.seen and all(r.stop == () and r.max_tokens == 512 for r in b.seen)
    b.seen.clear()
    assess_cell(StrategyContext(llm=llm, cfg=compose(["strategy=three_agent"])), generate(1))
    assert any(r.stop == SCORE_STOP and r.max_tokens == 64 for r in b.seen)


# --------------------------------------------------------------------------- #
# 8. Prompt wording: a prompt set made from a checkout (here a fake one, made-up text
# in the layout of theirs; madara never carries their sentences)
# --------------------------------------------------------------------------- #

_FAKE_PROMPTS = '''
RELEVANCE_ASSESSOR = (
    "Zebra relevance judge. "
    'Answer {"score": <0-5>, "evidence": "...", "reasoning": "..."}.'
)
CONSISTENCY_VERIFIER = "Zebra consistency judge."
CONFLICT_DETECTOR = "Zebra conflict judge."
COT_DEPOLARIZATION_PREFIX = "Think in zebra steps first. "
GENERATOR_FACTOID = "Zebra answerer."
GENERATOR_FEVER = "Zebra verifier."


def build_generator_user_prompt(question: str, documents: list[str]) -> str:
    joined = "\\n".join(documents)
    return f"ZDOCS:\\n{joined}\\nZQ: {question}"
'''
_FAKE_RSC = '''
_FORCED_REASONING_SYSTEM = "Zebra re-scorer."


class Probe:
    @staticmethod
    def _forced_user(question, document, steps):
        reasoning = "; ".join(steps)
        return (
            f"ZQ: {question}\\nZD: {document[:50]}\\n"
            f"ZR: {reasoning}"
        )
'''
_FAKE_TREATMENTS = '''
def _assessor_user(question, documents, target):
    target_doc = documents[target]
    others = " | ".join(documents)
    return f"ZQ: {question}\\nZD: {target_doc}\\nZO: {others}"
'''


def _fake_checkout(root):
    (root / "madara").mkdir(parents=True)
    (root / "madara" / "prompts.py").write_text(_FAKE_PROMPTS)
    (root / "madara" / "rsc.py").write_text(_FAKE_RSC)
    (root / "madara" / "treatments.py").write_text(_FAKE_TREATMENTS)
    return root


def test_import_reference_writes_a_prompt_set_that_runs(tmp_path, monkeypatch, backend):
    from madara_cli.agents.prompts import assessor_messages, forced_rescore_messages
    from madara_cli.config.folders import add_config_dir, prompts_of, shipped_prompt_set
    from madara_cli.config.reference_prompts import write_reference_set

    folder = write_reference_set(_fake_checkout(tmp_path / "ref"), tmp_path / "conf")
    assert folder == tmp_path / "conf" / "prompts" / "authors"
    assert (folder / "relevance_cot_system.txt").read_text() == (
        'Think in zebra steps first. Zebra relevance judge. Answer {"score": <0-5>, "evidence": "...", "reasoning": "..."}.\n')
    monkeypatch.delenv("MADARA_CONFIG_DIR", raising=False)
    add_config_dir(tmp_path / "conf")
    cfg = compose(["strategy=three_agent", "reading=authors", "prompts=authors"])
    ps = prompts_of(cfg)
    ex = generate(1)[0]
    docs = ex.docs
    # every assessor, the relevance one too, sees the other documents
    system, user = assessor_messages(ex, docs, 0, "relevance", prompts=ps)
    assert system.content.startswith("Zebra relevance judge.")
    assert user.content.startswith(f"ZQ: {ex.question}\nZD: ") and "\nZO: " in user.content and docs[1].text[:20] in user.content
    _, rescore = forced_rescore_messages(ex, docs[0], ["one step"], prompts=ps)
    assert rescore.content.startswith(f"ZQ: {ex.question}\nZD: ") and "ZR: - one step" in rescore.content
    # templates their code has no counterpart for come from the shipped set
    shipped = shipped_prompt_set()
    assert ps.render("judge_system", document="d", question="q", claim="q", answer="a") == shipped.render(
        "judge_system", document="d", question="q", claim="q", answer="a")
    b, llm = backend
    mats = assess_cell(StrategyContext(llm=llm, cfg=cfg), [ex])
    assert mats[0].scores.shape == (len(docs), 3)
    assert b.seen[0].messages[0].content.startswith("Zebra")
    # the prompt set's digest is in the key: the authors' wording is its own cell
    assert cell_from_cfg(cfg).config_hash != cell_from_cfg(compose(["strategy=three_agent", "reading=authors"])).config_hash


@pytest.mark.parametrize("layout", ["missing", "no_constant", "not_python"])
def test_import_reference_refuses_an_unrecognised_checkout(tmp_path, layout):
    from madara_cli.config.reference_prompts import write_reference_set

    root = _fake_checkout(tmp_path / "ref")
    if layout == "missing":
        (root / "madara" / "rsc.py").unlink()
    elif layout == "no_constant":
        (root / "madara" / "prompts.py").write_text(_FAKE_PROMPTS.replace("CONFLICT_DETECTOR", "OTHER"))
    else:
        (root / "madara" / "treatments.py").write_text("def (:\n")
    with pytest.raises(ConfigError) as err:
        write_reference_set(root, tmp_path / "conf")
    msg = str(err.value)
    assert "\n" not in msg and ("rsc.py" in msg if layout == "missing" else "CONFLICT_DETECTOR" in msg if layout == "no_constant" else "treatments.py" in msg)
    assert not (tmp_path / "conf" / "prompts").exists()


def test_import_reference_command_is_one_line_on_a_bad_folder(tmp_path, monkeypatch, capsys):
    from tests.fakes import cli

    code, _, err = cli("prompts", "import-reference", str(tmp_path / "nowhere"), "--out", str(tmp_path / "c"), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1 and "js-lee-AI/MADARA" in err


def test_show_names_the_reading(tmp_path):

    from madara_cli.commands.list_verbs import _reading_of

    assert _reading_of(tmp_path) == "paper"  # a cell folder without config.yaml (or from before the group)
    (tmp_path / "config.yaml").write_text(compose(["reading=paper"]).to_yaml())
    assert _reading_of(tmp_path) == "paper"
    (tmp_path / "config.yaml").write_text(compose(["reading=authors", "reading.shuffle=changed"]).to_yaml())
    shown = _reading_of(tmp_path)
    assert shown.startswith("authors (conflict=score_field, score_parser=authors") and "shuffle" not in shown


def test_pde_random_key_ignores_the_assessors_readings():
    base = ["strategy=pde_random"]
    plain = cell_from_cfg(compose(base)).config_hash
    for setting in ("reading.conflict=score_field", "reading.score_parser=authors", "reading.requests=authors"):
        assert cell_from_cfg(compose([*base, setting])).config_hash == plain, setting
    assert cell_from_cfg(compose([*base, "reading.pde_grouping=authors"])).config_hash != plain


# --------------------------------------------------------------------------- #
# 9. The probe under the preset computes what their probe computes (issue 36)
# --------------------------------------------------------------------------- #


def _tracking(user: str, sig: int) -> int:
    """A model whose re-score follows the analysis it is handed (tests/diagnose/test_probe.py's)."""
    import re

    tag = re.search(r"Evidence tag (\d+)", user)
    if tag is None:
        return sig % 6
    if int(tag.group(1)) != sig:
        return int(tag.group(1)) % 6
    return min(5, max(0, sig % 6 + (sig // 7) % 3 - 1)) if "irrelevant" in user else sig % 6


def test_stop_stripped_rescore_replies_read_as_zero_by_their_parser():
    """Why the preset's re-score sends no stop string: an engine drops the ``}`` it stops
    at, and their parser reads a reply without its closing brace as 0."""
    from tests.fakes import stopped

    reply = json.dumps({"score": 4, "confidence": 3})
    assert parse_score_authors(stopped(reply, SCORE_STOP)).value == 0.0
    assert parse_score_authors(stopped(reply, ())).value == 4.0


def test_the_presets_probe_reads_generated_rescores_as_their_parser_does(tmp_path):
    """End to end on an engine that drops its stop strings: every forced re-score goes out
    without one, so each reply is read as their parser reads the whole reply; the
    tracking model is quality-ordered and, over NF's floor, routes to ATF (sent with the
    stop string, every re-score read 0: ρ̂ [0, 0, 0], and SDA)."""
    from madara_cli.agents.parsing import parse_score_authors as theirs
    from madara_cli.core.records import ChatRequest
    from madara_cli.diagnose import router
    from tests.fakes import FORCED_RESCORE_SYSTEM, scripted_probe, stopped

    record, _, _, backend, _, _ = scripted_probe(tmp_path, _tracking, 6, "reading=authors")
    forced = [r for r in backend.requests if isinstance(r, ChatRequest) and r.messages[0].content == FORCED_RESCORE_SYSTEM]
    assert len(forced) == 180 and all(r.stop == () and r.max_tokens == 256 for r in forced)
    replies = [json.dumps({"score": _tracking(r.messages[-1].content, _signature(r)), "confidence": 3}) for r in forced]
    assert all(theirs(stopped(text, r.stop)).value == _tracking(r.messages[-1].content, _signature(r)) for text, r in zip(replies, forced))
    r1, r2, r3 = record.rho
    assert r1 == pytest.approx(1.0) and r1 > r2 > r3 and record.rsc_class == "quality-ordered"
    assert router.route(router.Diagnostics.from_probe(50.0, record)).strategy == "atf"


def _signature(request) -> int:
    from tests.fakes import document_signature

    return document_signature(request.messages[-1].content)


def test_the_papers_probe_still_stops_its_rescore(tmp_path):
    from madara_cli.core.records import ChatRequest
    from tests.fakes import FORCED_RESCORE_SYSTEM, scripted_probe

    _, _, _, backend, _, _ = scripted_probe(tmp_path, _tracking, 6)
    forced = [r for r in backend.requests if isinstance(r, ChatRequest) and r.messages[0].content == FORCED_RESCORE_SYSTEM]
    assert forced and all(r.stop == SCORE_STOP for r in forced)


def test_no_brace_is_restored_to_their_parser_when_no_stop_string_was_sent():
    from madara_cli.agents.parsing import read_reply
    from madara_cli.core.records import Completion

    open_object = Completion(text='{"score": 4, "reasoning": "fine"', finish_reason="stop")  # ended without its brace
    assert read_reply(open_object, "relevance", "generate", "authors", stop_sent=False)[0].value == 0.0  # as their code reads it
    assert read_reply(open_object, "relevance", "generate", "authors", stop_sent=True)[0].value == 4.0  # the stop string took it
    assert read_reply(open_object, "relevance", "generate", "madara", stop_sent=False)[0].value == 4.0  # madara's lenient reading


def test_the_presets_assessors_read_unstopped_replies_as_they_came(backend):
    class OpenEnded(Recording):
        def chat(self, requests):
            return [c if "reviewers" not in r.messages[0].content else type(c)(text='{"score": 4', finish_reason="stop")
                    for r, c in zip(requests, super().chat(requests))]

    from madara_cli.backends.cache import CachedLLM as Cached

    b, llm = backend
    open_ended = Cached(OpenEnded(), llm.cache)
    mats = assess_cell(StrategyContext(llm=open_ended, cfg=compose(["strategy=three_agent", "reading=authors"])), generate(1))
    assert mats and (mats[0].scores == 0.0).all()  # no stop string went out, so no brace came off
    mats = assess_cell(StrategyContext(llm=open_ended, cfg=compose(["strategy=three_agent", "reading.score_parser=authors"])), generate(1))
    assert (mats[0].scores[:, 0] == 4.0).all()  # base replies stopped at "}": the brace is put back


@pytest.mark.parametrize("steps", [[1, 2, 3], [{"step": 1, "text": "It is relevant."}], ["One.", 2]])
def test_steps_written_as_numbers_or_objects_fall_back_to_the_whole_reply(steps):
    reply = json.dumps({"reasoning_steps": steps, "score": 3})
    assert perturb.chain_from_field(reply) == [reply]  # their join fails: the reply is the chain
    assert perturb.chain_from_field('{"reasoning": 4, "score": 3}') == ["4"]  # a lone value as Python writes it
    assert perturb.chain_from_field('{"reasoning_steps": ["A is so.  B is so.", "C."]}') == ["A is so.", "B is so.", "C."]


def test_field_steps_are_shuffled_contradicted_and_lent_as_they_are():
    chain = perturb.chain_from_field('{"reasoning_steps": ["It says \\"yes.\\" Then it stops.", "(See 1.) Fine  here.", "Last."]}')
    # their splitter cuts only where whitespace follows . ! ? itself: a quote or bracket in between keeps the step whole
    assert chain == ['It says "yes." Then it stops.', "(See 1.) Fine  here.", "Last."]
    assert len(perturb.split_sentences(chain)) == 5  # madara's would cut both steps again
    levels = perturb.perturb_chains([[chain, ["Other one.", "Other two."]]], seed=3, shuffle="may_repeat", resplit=False)
    assert sorted(levels.shuffled[0][0]) == sorted(chain)  # a permutation of the steps as written
    assert levels.contradicted[0][0] == chain and levels.random[0][1] == chain  # nothing split or trimmed


def test_the_presets_rescore_shows_the_document_and_steps_as_their_code_does():
    from madara_cli.agents.prompts import RESCORE_BEGIN, RESCORE_END, forced_rescore_messages
    from madara_cli.core.records import Doc

    ex = generate(1)[0]
    doc = Doc(id="d", title="", text="x" * 2500)
    steps = ["First  step,   spaced.", " Leading space."]
    _, ours = forced_rescore_messages(ex, doc, steps)
    _, authors = forced_rescore_messages(ex, doc, steps, shape="authors")
    assert "x" * 2000 + " ..." in ours.content and "x" * 2001 not in ours.content
    assert "x" * 2000 + "\n" in authors.content and "x" * 2000 + " ..." not in authors.content
    chain = authors.content.split(RESCORE_BEGIN + "\n", 1)[1].split("\n" + RESCORE_END, 1)[0]
    assert chain == "- First  step,   spaced.\n-  Leading space."
    assert "- First step, spaced.\n- Leading space." in ours.content
    _, empty = forced_rescore_messages(ex, doc, [], shape="authors")
    assert "(there is no previous analysis)" in empty.content and "- (there" not in empty.content


def test_authors_keys_move_with_what_their_reading_now_computes():
    # the hashes reading=authors gave before issue 36 (under the path-keyed rule of then):
    # its finished cells and probes are not read back, under either rule
    authors = compose(["strategy=three_agent", "reading=authors"])
    assert {c.config_hash for c in (identify(authors).cell, *identify(authors).legacy)}.isdisjoint({"6e0ba06e"})
    assert {p.config_hash for p in (identify_probe(authors).probe, *identify_probe(authors).legacy)}.isdisjoint({"69a2cfbf"})
    # a family whose computation did not change keeps its key (found under its key of before)
    strip = identify(compose(["strategy=three_agent", "reading.answers=strip"]))
    assert [c.config_hash for c in strip.legacy] == ["7da900b0"]
    row = identify(authors).settings(authors)
    assert row["reading.requests"] == "authors"  # summary.csv shows the value, not the revision
