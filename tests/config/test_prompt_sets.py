"""Prompt sets (``prompts=NAME``, ``configs/prompts/<set>/``): the shipped set renders
every request exactly as the Python constants did before the move (so cell keys and
the response cache still hit), a set of one's own changes the words and the keys, and
a broken set fails at compose time in one line."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from madara_cli.agents.generator import generation_request
from madara_cli.agents.prompts import AGENTS, RESCORE_BEGIN, assessor_messages, detector_messages, forced_rescore_messages, judge_messages
from madara_cli.composition import compose
from madara_cli.config import identity as digest
from madara_cli.config.folders import config_dir, prompt_set, shipped_prompt_set
from madara_cli.config.prompt_sets import Template, TemplateError
from madara_cli.core.errors import ConfigError
from madara_cli.core.records import ChatRequest, Doc, Example
from madara_cli.retrievers.rerank import QWEN3_PREFIX, rerank_request
from tests.conftest import ROOT
from tests.fakes import cli, only_cell

# The shipped families, each declared where its builders live (madara_cli.agents.families;
# the reranker's in madara_cli.retrievers.rerank).
FAMILIES = ("generator", "assessors", "detector", "judge", "rerank", "rescore")

# Rendered requests and digests captured at commit 62abdde, before the prompts left
# the Python modules (the digest's synthetic examples in every mode, and the requests
# of _extra_requests() below as sha256s).
FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "prompt_requests_62abdde.json").read_text(encoding="utf-8"))


def _extra_requests() -> list[dict]:
    """Harder inputs than the digest's: a document over the re-score's 2000-character
    cut, braces and field-like text in documents, questions, answers and chains, one
    document alone, none at all. Built exactly as at 62abdde."""
    long = Doc("L", "word " * 700 + "{question} {{document}} end.", "Long {title}")
    odd = Doc("O", "A doc quoting {{question}} and {index} and %s and \\n.", "")
    docs3 = (long, odd, Doc("s", "Short.", "S"))
    exs = (Example("q", "Who {wrote} {{document}}?", ("x",), docs3, "factoid"), Example("c", "The claim {{claim}}.", ("SUPPORTS",), docs3, "fever"))
    out = []
    for ex in exs:
        for agent in AGENTS:
            for cot, lp in ((False, False), (True, False), (False, True)):
                out.append(ChatRequest(messages=assessor_messages(ex, docs3, 1, agent, cot=cot, logprob=lp)).canonical())
                out.append(ChatRequest(messages=assessor_messages(ex, docs3[:1], 0, agent, cot=cot, logprob=lp)).canonical())
        for cot in (False, True):
            out.append(ChatRequest(messages=detector_messages(ex, docs3, cot=cot)).canonical())
            out.append(ChatRequest(messages=detector_messages(ex, (), cot=cot)).canonical())
            out.append(ChatRequest(messages=detector_messages(ex, docs3[:1], cot=cot)).canonical())
        out.append(ChatRequest(messages=forced_rescore_messages(ex, long, ["x " + RESCORE_BEGIN + " y", "  spaced   out  ", "", "{{chain}}"])).canonical())
        out.append(ChatRequest(messages=judge_messages(ex, odd, "{{answer}}")).canonical())
        for style in ("zeroshot", "oneshot"):
            out.append(generation_request(ex, docs3, 32, 0.6, 1, style=style).canonical())
            out.append(generation_request(ex, (), 32, 0.6, 1, style=style).canonical())
    out.append(rerank_request("q {{question}}", odd).canonical())
    out.append(rerank_request("q", long, QWEN3_PREFIX).canonical())
    return out


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    """A --config-dir folder holding ``prompts/mine``, a copy of the shipped set."""
    shutil.copytree(config_dir() / "prompts" / "madara", tmp_path / "prompts" / "mine")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    return tmp_path


# --- the shipped set: byte-identical to the code it replaced ---------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_set_renders_every_family_in_every_mode_as_before(family):
    from madara_cli.composition import ensure_loaded
    from madara_cli.plugins.catalog import CATALOG

    ensure_loaded()
    now = [r.canonical() for r in CATALOG.family(family).sample(shipped_prompt_set())]
    assert json.loads(json.dumps(now)) == FIXTURE["requests"][family]
    assert digest.prompt_digest(family) == FIXTURE["digests"][family]


def test_shipped_digests_are_the_recorded_values():
    assert FIXTURE["commit"] == "62abdde"
    assert {f: digest.prompt_digest(f, prompt_set("madara")) for f in FAMILIES} == {
        "generator": "cb4a66824e7f6b2a", "assessors": "855e723fcd2c2a21", "detector": "9c5ec7a9100a1ae1",
        "judge": "5c555048f2f92c01", "rerank": "feefadf03ec07311", "rescore": "14fd9ccb20c7a611",
    }


def test_shipped_set_renders_hard_inputs_as_before():
    got = [hashlib.sha256(json.dumps(r, sort_keys=True, ensure_ascii=False).encode()).hexdigest() for r in _extra_requests()]
    assert got == FIXTURE["extra_sha256"]


def test_the_shipped_set_is_complete_and_packaged():
    folder = ROOT / "configs" / "prompts" / "madara"
    from madara_cli.composition import ensure_loaded
    from madara_cli.plugins.catalog import CATALOG

    ensure_loaded()
    shipped = {t for name, f in CATALOG.families().items() if CATALOG.owner("prompts", name).startswith("madara_cli.") for t in f.templates}
    assert sorted(p.stem for p in folder.glob("*.txt")) == sorted(shipped)
    assert "*.txt" in (ROOT / "setup.py").read_text()  # nested config folders and their text files ship in the wheel


# --- the renderer: named fields, nothing else ------------------------------------------------


def test_renderer_fills_named_fields_and_keeps_everything_else_literal():
    t = Template.parse('Q: {{question}} {"score": N} {{ document }} \\{{question}} {{{index}}}')
    assert t.fields == ("question", "document", "index")
    assert t.render({"question": "why?", "document": "D", "index": 3}) == 'Q: why? {"score": N} D {{question}} {3}'


@pytest.mark.parametrize("text", ["{{question.__class__}}", "{{question|upper}}", "{{ 1 }}", "{{question", "{{x[0]}}", "{{}}", "{{a b}}"])
def test_renderer_refuses_anything_but_a_plain_field(text):
    with pytest.raises(TemplateError):
        Template.parse(text)


def test_substituted_text_is_never_read_as_a_template():
    t = Template.parse("{{question}} / {{document}}")
    assert t.render({"question": "{{document}}", "document": "{{question}} \\{{x}}"}) == "{{document}} / {{question}} \\{{x}}"
    doc = Doc("d", "This page quotes {{question}} and {{other_documents}} verbatim.", "T {{index}}")
    ex = Example("q", "What does {{document}} say?", ("x",), (doc, Doc("e", "{{chain}}")), "factoid")
    system, user = (m.content for m in assessor_messages(ex, ex.docs, 0, "consistency"))
    assert "Question: What does {{document}} say?" in user
    assert "T {{index}}\nThis page quotes {{question}} and {{other_documents}} verbatim." in user
    assert "[2] {{chain}}" in user and "{{" not in system
    gen = generation_request(ex, ex.docs, 8, 0.0, 0).messages[1].content
    assert "quotes {{question}} and" in gen and "Question: What does {{document}} say?" in gen


# --- a set of one's own ----------------------------------------------------------------------


def test_a_user_set_changes_the_words_and_the_digests(user_dir):
    mine = user_dir / "prompts" / "mine"
    assert {f: digest.prompt_digest(f, prompt_set("mine")) for f in FAMILIES} == FIXTURE["digests"]  # same words, same digests
    (mine / "judge_system.txt").write_text("You judge evidence. Reply Yes or No.\n", encoding="utf-8")
    (mine / "question_line.txt").write_text("Q: {{question}}\n", encoding="utf-8")
    ps = prompt_set("mine")
    ex = Example("q", "Where?", ("x",), (Doc("d", "Here."),), "factoid")
    assert judge_messages(ex, ex.docs[0], "Here", ps)[0].content == "You judge evidence. Reply Yes or No."
    assert assessor_messages(ex, ex.docs, 0, "relevance", prompts=ps)[1].content.startswith("Q: Where?\n\n")
    moved = {f: digest.prompt_digest(f, ps) for f in FAMILIES}
    assert {f for f in moved if moved[f] != FIXTURE["digests"][f]} == {"judge", "assessors", "detector", "rescore"}


def test_prompts_is_a_config_key_shown_in_the_composed_config(user_dir):
    assert compose([]).prompts == "madara"
    assert compose(["prompts=mine"]).prompts == "mine"
    out = cli("run", "prompts=mine", "--config-dir", str(user_dir), "strategy=three_agent", "limit=1", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    assert "\nprompts: mine\n" in out.stdout


def test_a_partial_set_extends_another(user_dir):
    part = user_dir / "prompts" / "short"
    part.mkdir()
    (part / "set.yaml").write_text("extends: mine\n", encoding="utf-8")
    (part / "factoid_system.txt").write_text("Answer in one word.\n", encoding="utf-8")
    ps = prompt_set("short")
    ex = Example("q", "Where?", ("x",), (Doc("d", "Here."),), "factoid")
    assert generation_request(ex, ex.docs, 8, 0.0, 0, prompts=ps).messages[0].content == "Answer in one word."
    assert ps.templates["relevance_system"] == shipped_prompt_set().templates["relevance_system"]
    (part / "set.yaml").write_text("extends: short\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="leads back"):
        prompt_set("short")


def _compose_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        compose(list(overrides))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_broken_set_fails_at_compose_time_in_one_line(user_dir):
    mine = user_dir / "prompts" / "mine"
    assert "unknown prompt set 'nope'" in _compose_error("prompts=nope")
    assert "unknown prompt set '../strategy'" in _compose_error("prompts=../strategy")  # a name, never a path
    (mine / "consistency_user.txt").write_text("{{question}}\n{{documnet}}\n", encoding="utf-8")
    msg = _compose_error("prompts=mine")
    assert "'mine'" in msg and "consistency_user.txt" in msg and "{{documnet}}" in msg
    (mine / "consistency_user.txt").write_text("{{question.__class__}}\n", encoding="utf-8")
    msg = _compose_error("prompts=mine")
    assert "'mine'" in msg and "consistency_user.txt" in msg and "opens no field" in msg
    (mine / "consistency_user.txt").unlink()  # a template the set does not word: the shipped one
    assert prompt_set("mine").templates["consistency_user"] == shipped_prompt_set().templates["consistency_user"]
    (mine / "relevence_user.txt").write_text("x\n", encoding="utf-8")
    assert "unknown file relevence_user.txt" in _compose_error("prompts=mine")
    # From the command line: one line, exit 2, no traceback, before any model loads.
    out = cli("--config-dir", str(user_dir), "run", "prompts=mine", "strategy=nf", "limit=1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "relevence_user.txt" in out.stderr


@pytest.mark.parametrize("body", ["", "\n", "  \n\t\n"])
def test_an_empty_template_is_refused_at_compose_time(user_dir, body):
    (user_dir / "prompts" / "mine" / "judge_system.txt").write_text(body, encoding="utf-8")
    msg = _compose_error("prompts=mine")
    assert "judge_system.txt" in msg and "the template is empty" in msg


def test_a_template_saved_with_a_bom_reads_as_without(user_dir):
    f = user_dir / "prompts" / "mine" / "judge_system.txt"
    f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())
    compose(["prompts=mine"])
    # the same words, so the same digests as the shipped set's
    assert {fam: digest.prompt_digest(fam, prompt_set("mine")) for fam in FAMILIES} == FIXTURE["digests"]


def test_a_user_set_reaches_every_request_of_a_cell(user_dir, tmp_path):
    """A three-agent cell over a fake engine with prompts=mine: the generator, the
    assessors and the per-query detector all send the user set's words, they are
    what prompts.jsonl logs, and the cell's key moves."""
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.grid import cell_from_cfg
    from madara_cli.experiment.runner import run_cell
    from tests.fakes import FakeBackend

    mine = user_dir / "prompts" / "mine"
    for name, extra in (("factoid_system", "Mind the dates."), ("relevance_system", "Be strict about dates."), ("detector_system", "Trust no date.")):
        path = mine / f"{name}.txt"
        path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + " " + extra + "\n", encoding="utf-8")
    from madara_cli.data.mini import generate

    overrides = ["strategy=three_agent", "limit=2", f"results_dir={tmp_path / 'results'}"]
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        res = run_cell(compose([*overrides, "prompts=mine"]), pool, examples=generate(2))
    rows = [json.loads(x) for x in (res.folder / "prompts.jsonl").read_text(encoding="utf-8").splitlines()]
    systems = {r["stage"]: [m["content"] for r2 in rows if r2["stage"] == r["stage"] for m in r2["messages"] if m["role"] == "system"] for r in rows}
    assert any("Be strict about dates." in s for s in systems["score"])
    assert all(s.endswith("Trust no date.") for s in systems["score-conflict"])
    assert all(s.endswith("Mind the dates.") for s in systems["generate"])
    assert res.folder.name != cell_from_cfg(compose(overrides)).key


@pytest.mark.llm
def test_run_with_a_prompt_set_only_in_a_config_dir(user_dir, tmp_path):
    """The issue's acceptance check on the real SmolLM2: ``prompts=mine`` exists only
    under --config-dir, and the cell's prompts.jsonl shows its wording."""
    mine = user_dir / "prompts" / "mine"
    rel = mine / "relevance_system.txt"
    rel.write_text(rel.read_text(encoding="utf-8").replace("Decide how useful the document is", "Judge how helpful the document is"), encoding="utf-8")
    results = tmp_path / "results"
    # One query over its top 2 documents: 2 x 2 assessor calls, the detector and the generator.
    out = cli("run", "prompts=mine", "--config-dir", str(user_dir), "strategy=three_agent", "limit=1", "retriever.k=2", "strategy.top_k=1",
                 f"results_dir={results}", timeout=1200)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(x) for x in (only_cell(results) / "prompts.jsonl").read_text(encoding="utf-8").splitlines()]
    systems = [m["content"] for r in rows for m in r["messages"] if m["role"] == "system"]
    assert any("Judge how helpful the document is" in s for s in systems)
    assert not any("Decide how useful the document is" in s for s in systems)
    assert {r["stage"] for r in rows} == {"score", "score-conflict", "generate"}


def test_editing_a_detector_template_moves_a_madara_cells_key(user_dir):
    """strategy=madara routes to treatments that ask the Conflict Detector: its words are
    in the key (they were not, and a finished madara cell was reused after an edit)."""
    from madara_cli.experiment.grid import cell_from_cfg

    before = cell_from_cfg(compose(["strategy=madara", "prompts=mine"])).key
    (user_dir / "prompts" / "mine" / "detector_system.txt").write_text("Find the documents that disagree.\n", encoding="utf-8")
    assert cell_from_cfg(compose(["strategy=madara", "prompts=mine"])).key != before


def test_a_set_without_extends_words_only_what_it_holds(user_dir):
    """A set of one's own need not copy the shipped set nor say extends: what it does not
    word comes from the shipped set."""
    only = user_dir / "prompts" / "only"
    only.mkdir()
    (only / "factoid_system.txt").write_text("Answer in one word.\n", encoding="utf-8")
    ps = prompt_set("only")
    assert ps.render("factoid_system", documents="", question="", claim="") == "Answer in one word."
    assert ps.templates["relevance_system"] == shipped_prompt_set().templates["relevance_system"]
    assert compose(["prompts=only"]).prompts == "only"


@pytest.fixture
def catalog(monkeypatch):
    """What this test registers stays in it."""
    from tests.fakes import fresh_catalog

    yield from fresh_catalog(monkeypatch)


def test_a_plugins_declared_families_decide_its_key(user_dir, catalog):
    from madara_cli.plugins import register
    from madara_cli.strategies.context import StrategySpec

    def never(ctx, examples):  # pragma: no cover - never run
        return []

    register(StrategySpec(name="judged_test", run=never, prompts=("judge",)))
    register(StrategySpec(name="plain_test", run=never))

    mine = user_dir / "prompts" / "mine"
    base = {s: digest.prompt_digests(s, prompts=prompt_set("mine")) for s in ("judged_test", "plain_test")}
    assert set(base["judged_test"]) == {"generator", "judge"} and set(base["plain_test"]) == {"generator"}
    (mine / "detector_system.txt").write_text("Find the documents that disagree.\n", encoding="utf-8")
    assert {s: digest.prompt_digests(s, prompts=prompt_set("mine")) for s in base} == base  # not sent: not keyed
    (mine / "judge_system.txt").write_text("You judge evidence. Reply Yes or No.\n", encoding="utf-8")
    after = {s: digest.prompt_digests(s, prompts=prompt_set("mine")) for s in base}
    assert after["judged_test"] != base["judged_test"] and after["plain_test"] == base["plain_test"]
    register(StrategySpec(name="bad_test", run=never, prompts=("jduge",)))
    (user_dir / "strategy").mkdir()
    (user_dir / "strategy" / "bad_test.yaml").write_text("name: bad_test\n")
    assert "strategy bad_test sends prompt family 'jduge', which nothing declares" in _compose_error("strategy=bad_test")
