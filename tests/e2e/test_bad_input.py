"""Bad input, as a new user would type it: each case ends in ONE clear line and a
non-zero exit (or a counted fallback), before any model loads where the input can be
checked up front, and never loses work that had finished.

Most cases go through the real entry point (:func:`madara_cli.cli.main`, in process,
with ``sys.argv`` set: ``tests.fakes.cli`` with ``monkeypatch``); the cases that need an engine use
the deterministic fake engine (``tests.fakes.FakeBackend``). SIGKILL mid-stage is tests/e2e/test_resume.py; SIGINT is
tested here both on the entry point and (marked ``llm``) on a real run.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition import compose
from madara_cli.core.errors import CacheError, ConfigError, DataError
from madara_cli.core.records import ChatRequest, Completion, Message
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from tests.conftest import ROOT
from tests.fakes import FakeBackend, cli, musique_row, one_line_error, spawn

# --------------------------------------------------------------------------- #
# Unknown names


@pytest.mark.parametrize(
    "override,needle",
    [
        ("model=no-such-model", "valid models: "),
        ("benchmark=nope", "valid benchmarks: "),
        ("strategy=nope", "valid strategies: "),
        ("backend=tpu", "valid backends: "),
        ("retriever=grep", "valid retrievers: "),
    ],
)
def test_unknown_group_option_names_the_valid_ones(monkeypatch, capsys, no_engine, tmp_path, override, needle):
    code, _, err = cli("run", override, f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, needle)
    assert not (tmp_path / "r").exists()


def test_unknown_grid_and_command(monkeypatch, capsys, no_engine):
    code, _, err = cli("run", "--grid", "nope", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "unknown grid 'nope'", "demo")
    code, _, err = cli("rnu", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "valid commands:", "run")


# --------------------------------------------------------------------------- #
# Malformed overrides and types


@pytest.mark.parametrize(
    "override,needles",
    [
        ("limit=abc", ("limit: expected an integer or null", "'abc'")),
        ("seed=", ("seed= has no value", "an integer")),
        ("model.temperature=hot", ("model.temperature: expected a number", "'hot'")),
        ("strategy.cot=maybe", ("strategy.cot: expected true or false",)),
        ("strategy.weights=[a,b,c]", ("strategy.weights: expected a list of numbers",)),
        ("limt=3", ("unknown key 'limt'", "limit")),
        ("strategy.top_kk=3", ("unknown key 'strategy.top_kk'", "top_k")),
        ("model=[", ("malformed override",)),
    ],
)
def test_malformed_overrides_name_key_and_type(monkeypatch, capsys, no_engine, override, needles):
    code, _, err = cli("run", "strategy=three_agent", override, monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, *needles)
    assert "Error merging override" not in line


# --------------------------------------------------------------------------- #
# Ranges and choices, checked at compose time (before any data or model)


@pytest.mark.parametrize(
    "override,needle",
    [
        ("strategy.top_k=-3", "strategy.top_k=-3 is out of range: expected an integer >= 1"),
        ("strategy.top_k=0", "expected an integer >= 1"),
        ("limit=0", "limit=0 is out of range: expected an integer in [1, 1000000000] or null"),
        ("limit=10000000000", "limit=10000000000 is out of range"),
        ("seed=4294967296", "seed=4294967296 is out of range: expected an integer in [0, 4294967295]"),
        ("retriever.k=10001", "retriever.k=10001 is out of range"),
        ("router.iso_alpha=0", "router.iso_alpha=0.0 is out of range: expected a number in (0, 1)"),
        ("router.iso_alpha=1", "router.iso_alpha=1.0 is out of range: expected a number in (0, 1)"),
        ("router.iso_alpha=1.5", "router.iso_alpha=1.5 is out of range"),
        ("router.iso_min_gain=-1", "router.iso_min_gain=-1.0 is out of range"),
        ("strategy=madara benchmark.calibration=1", "benchmark.calibration=1 is out of range for strategy=madara"),
        ("strategy=madara benchmark.calibration=0", "at least 2 calibration queries"),
        ("limit=-1", "limit=-1 is out of range"),
        ("seed=-1", "seed=-1 is out of range"),
        ("retriever.k=0", "retriever.k=0"),
        ("strategy.weights=[1]", "strategy.weights has 1 value(s); expected 3"),
        ("strategy.weights=[0,0,0]", "not all zero"),
        ("strategy=atf strategy.kappa=-1", "strategy.kappa=-1"),
        ("strategy=atf strategy.min_keep=-2", "strategy.min_keep=-2"),
        ("rsc.rescoring=bogus", "rsc.rescoring='bogus' is not a valid choice; valid: generate, logprob"),
        ("strategy.scoring=json", "valid: generate, logprob"),
        ("strategy.vote=majority", "valid: score, uniform"),
        ("strategy.selection=best", "valid: assessed, random"),
        ("model.temperature=-0.5", "model.temperature=-0.5"),
        ("backend.n_threads=0", "backend.n_threads=0"),
        # round four: numbers past what an engine can do
        ("model.temperature=1e308", "model.temperature=1e+308 is out of range: expected a number in [0, 2]"),
        ("generation.max_tokens=100000000", "generation.max_tokens=100000000 leaves no room for a prompt in model.max_model_len=4096"),
        ("backend.n_ctx=1", "generation.max_tokens=32 leaves no room for a prompt in backend.n_ctx=1"),
        ("generation.cot_max_tokens=4090", "generation.cot_max_tokens=4090 leaves no room for a prompt in model.max_model_len=4096"),
        ("model.max_model_len=100000000000", "model.max_model_len=100000000000 is out of range: expected an integer in [1, 1048576]"),
        ("backend.n_threads=100000", "backend.n_threads=100000 is out of range: expected an integer in [1, 512] or null"),
        ("backend=hf backend.n_threads=-3", "backend.n_threads=-3 is out of range: expected an integer in [1, 512] or null"),
    ],
)
def test_out_of_range_settings_fail_before_any_work(monkeypatch, capsys, no_engine, tmp_path, override, needle):
    overrides = override.split() if override.startswith(("strategy=", "backend=")) else ["strategy=pde", override]
    code, _, err = cli("run", *overrides, f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, needle)
    assert not (tmp_path / "r").exists(), "nothing may be written for a refused config"


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["strategy=sda", "strategy.kappa=0.9"], "strategy.kappa does not apply to strategy sda; its settings: name, top_k, weights, scoring, cot, conflict, rank_ties"),
        (["strategy.top_k=3"], "strategy.top_k does not apply to strategy nf; its settings: name"),
        (["strategy=pde_random", "strategy.n_samples=3"], "strategy.n_samples does not apply to strategy pde_random; its settings: name, top_k"),
        (["-m", "strategy=nf,sda", "strategy.kappa=0.9"], "strategy.kappa does not apply to any strategy of grid adhoc (nf, sda)"),
        (["rsc.rescoring=bogus"], "rsc.rescoring='bogus' is not a valid choice; valid: generate, logprob"),
        (["strategy=three_agent", "strategy.scoring=bogus"], "strategy.scoring='bogus' is not a valid choice; valid: generate, logprob"),
        (["strategy=sda", "strategy.rank_ties=dense"], "strategy.rank_ties='dense' is not a valid choice; valid: ordinal, average"),
        (["strategy=three_agent", "strategy.rank_ties=average"], "strategy.rank_ties does not apply to strategy three_agent"),
        (["strategy=atf", "strategy.conflict=sometimes"], "strategy.conflict='sometimes' is not a valid choice; valid: per_query, per_document"),
    ],
)
def test_a_setting_of_another_strategy_or_a_bad_choice_stops_before_any_work(monkeypatch, capsys, no_engine, tmp_path, overrides, needle):
    code, _, err = cli("run", *overrides, f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, needle)
    assert code == 2
    assert not (tmp_path / "r").exists(), "nothing may be written for a refused config"


# Each pair of madara_cli/config/validate.py CONFLICTS, as a user writes it: (overrides, what the line names).
_CONFLICTING = {
    "strategy.conflict": (["strategy=three_agent", "reading=authors", "strategy.conflict=per_query"],
                          ("strategy.conflict=per_query conflicts with reading.conflict=score_field", "per_document")),
    "strategy.scoring": (["strategy=sda_cot", "strategy.scoring=logprob"],
                         ("strategy.scoring=logprob conflicts with strategy.cot=true", "generated text")),
    "rsc.isolation_probe": (["strategy=madara", "router.policy=isolation", "rsc.isolation_probe=false"],
                            ("rsc.isolation_probe=false conflicts with router.policy=isolation",)),
    "router.iso_alpha": (["strategy=madara", "router.iso_alpha=0.01"],
                         ("router.iso_alpha=0.01 conflicts with router.policy=paper and rsc.isolation_probe=false",)),
    "router.iso_min_gain": (["strategy=madara", "router.iso_min_gain=2"],
                            ("router.iso_min_gain=2.0 conflicts with router.policy=paper and rsc.isolation_probe=false",)),
}


@pytest.mark.parametrize("key", list(_CONFLICTING))
def test_conflicting_settings_are_refused_at_compose_time_with_the_pair_named(monkeypatch, capsys, no_engine, tmp_path, key):
    """strategy.conflict=per_query beside reading=authors ran per document without a word
    (the reading wins in agents/scoring.py); each such pair is one line naming both."""
    overrides, needles = _CONFLICTING[key]
    code, _, err = cli("run", *overrides, f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    one_line_error(code, err, *needles)
    assert not (tmp_path / "r").exists()


def test_every_conflicting_pair_is_tested_and_a_default_nobody_wrote_is_no_conflict():
    from madara_cli.config.validate import CONFLICTS

    assert sorted(c.asked[0] for c in CONFLICTS) == sorted(_CONFLICTING)
    # The same values where the user wrote neither side that is a default: the cell composes.
    compose(["strategy=three_agent", "reading=authors"])  # strategy.conflict=per_query is three_agent's own default
    compose(["strategy=madara", "router.policy=isolation"])  # rsc.isolation_probe=false is the default
    compose(["strategy=madara", "router.iso_alpha=0.01", "rsc.isolation_probe=true"])  # the probe prints the isolation route


def test_a_grid_setting_that_fits_none_of_its_strategies_stops_before_any_work(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = cli("run", "--grid", "demo", "strategy.rrf_kk=3", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "unknown key 'strategy.rrf_kk'")
    code, _, err = cli("run", "--grid", "table16", "strategy.kappa=0.9", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "strategy.kappa does not apply to")
    assert code == 2 and not (tmp_path / "r").exists()


def test_launcher_jobs_below_one_are_refused(monkeypatch, capsys, no_engine, tmp_path):
    for jobs in ("0", "-2"):
        code, _, err = cli("run", "--grid", "demo", "--launcher", "joblib", "-j", jobs, f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, "'-j'", "greater than or equal to 1")
    from madara_cli.experiment.launch import multirun

    with pytest.raises(ConfigError, match="--jobs 0: expected a number of parallel processes >= 1"):
        multirun("demo", [f"results_dir={tmp_path / 'r'}"], "joblib", 0)
    assert not (tmp_path / "r").exists()


def test_every_shipped_config_passes_validation():
    from madara_cli.config import GROUPS, options

    for group in GROUPS:
        for name in options(group):
            compose([f"{group}={name}"])


def test_probe_and_route_and_compare_ranges(monkeypatch, capsys, no_engine):
    code, _, err = cli("probe", "--n", "-1", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "--n")
    code, _, err = cli("probe", "rsc.rescoring=bogus", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "rsc.rescoring='bogus'")
    code, out, err = cli("route", "--nf", "20", "--rho", "5", "-7", "2", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "[-1, 1]", "5 -7 2")
    assert "route:" not in out
    code, _, err = cli("compare", "a", "b", "--resamples", "0", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "--resamples")
    for option, value in (("--tau-nf", "130"), ("--rho1", "2"), ("--entropy", "1.5"), ("--entropy", "-0.1")):
        code, out, err = cli("route", "--nf", "20", "--rho", "0.5", "0.2", "0.1", option, value, monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, option)
        assert "route:" not in out


def test_missing_probe_file_for_madara(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = cli("run", "strategy=madara", f"strategy.probe={tmp_path / 'nope.json'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "strategy.probe: no probe file at")


@pytest.mark.parametrize("body,needle", [("{not json", "not a readable probe.json"), ('{"route": "pde"}', "lacks reason"),
                                         ('{"route": "teleport", "reason": "", "em_nf": 0, "rsc_class": "x"}', "unknown strategy 'teleport'")])
def test_malformed_probe_file_is_one_line(tmp_path, body, needle):
    from madara_cli.experiment.treat import read_probe

    path = tmp_path / "probe.json"
    path.write_text(body)
    with pytest.raises((DataError, ConfigError), match=needle) as e:
        read_probe(path)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- #
# benchmark.path files


def _run_file(monkeypatch, capsys, tmp_path, body: str | None, name: str = "bench.jsonl", benchmark: str = "musique"):
    path = tmp_path / name
    if body is not None:
        path.write_text(body)
    return cli("run", f"benchmark={benchmark}", f"benchmark.path={path}", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)


def test_missing_benchmark_file(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, None)
    one_line_error(code, err, "not found", "bench.jsonl")


def test_empty_jsonl_says_empty_not_stopiteration(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, "\n\n")
    line = one_line_error(code, err, "empty")
    assert "StopIteration" not in line


def test_malformed_jsonl_names_the_line(monkeypatch, capsys, no_engine, tmp_path):
    good = json.dumps(musique_row("2hop__1"))
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, f"{good}\n{{oops\n{good}\n")
    one_line_error(code, err, "bench.jsonl:2: not valid JSON")


# Lines json refuses in other ways than JSONDecodeError, and one it lets through.
HOSTILE_LINES = {
    "nested too deeply": '{"question": "q?", "answers": ["a"], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "integer of 5000 digits": '{"question": "q?", "answers": ["a"], "x": ' + "7" * 5000 + "}",
    "lone surrogate": '{"question": "Where is the tower\\ud800?", "answers": ["a"]}',
}
HOSTILE_SAYS = {"nested too deeply": "nested too deeply", "integer of 5000 digits": "an integer of more than 4,300 digits", "lone surrogate": "not Unicode text"}


def _hostile_rows(case: str, musique: bool) -> str:
    good = json.dumps(musique_row("2hop__1")) if musique else json.dumps({"question": "q?", "answers": ["a"]})
    bad = HOSTILE_LINES[case]
    if musique:
        row = musique_row("2hop__2")
        bad = bad.replace('{"question": "q?", "answers": ["a"]', json.dumps(row)[:-1]).replace(
            '{"question": "Where is the tower\\ud800?", "answers": ["a"]}', json.dumps(row).replace("Where is the tower?", "Where is the tower\\ud800?"))
    return f"{good}\n{bad}\n"


@pytest.mark.parametrize("benchmark", ["jsonl", "musique"])
@pytest.mark.parametrize("case", list(HOSTILE_LINES))
def test_a_hostile_line_is_one_line_naming_file_and_line(monkeypatch, capsys, no_engine, tmp_path, benchmark, case):
    """Deep nesting (RecursionError), a 5000-digit integer (ValueError) and a lone
    surrogate (a UnicodeEncodeError later, in the question hash) in the file of
    benchmark=jsonl and of a hub-format reader (MuSiQue): one line each, before any work."""
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, _hostile_rows(case, benchmark == "musique"), benchmark=benchmark)
    one_line_error(code, err, "bench.jsonl:2:", HOSTILE_SAYS[case])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("case", list(HOSTILE_LINES))
def test_a_hostile_corpus_line_is_one_line(tmp_path, case):
    from madara_cli.retrievers.saved_index import iter_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "title": "a", "text": "ok"}\n' + HOSTILE_LINES[case].replace('"question"', '"id": "2", "text"') + "\n")
    with pytest.raises(DataError, match=f"corpus.jsonl:2: .*{HOSTILE_SAYS[case]}"):
        list(iter_corpus(corpus))


def test_a_lone_surrogate_from_any_loader_is_one_line(monkeypatch):
    """The hub or a plug-in loader may hand over text that is not Unicode: refused when
    the examples are loaded, not in the question hash mid-run."""
    from madara_cli.core.records import Doc, Example
    from madara_cli.data import splits
    from madara_cli.data.loaders import LoaderSpec

    for ex in (Example(id="q1", question="Where is the tower\ud800?", answers=("a",)),
               Example(id="q1", question="Where?", answers=("a",), docs=(Doc(id="d", text="Paris \udfff"),))):
        monkeypatch.setattr(splits.CATALOG, "get", lambda kind, name, ex=ex: LoaderSpec(name=name, load=lambda cfg: [ex]))
        with pytest.raises(DataError, match="example 'q1' holds a lone surrogate"):
            splits.load_all_examples(compose(["benchmark=mini"]).benchmark)


def test_a_utf8_bom_is_accepted_by_every_reader(tmp_path):
    """Files saved by editors that write a byte-order mark read as without one."""
    from madara_cli.data.splits import load_all_examples
    from madara_cli.retrievers.saved_index import iter_corpus

    own = tmp_path / "own.jsonl"
    own.write_text("\ufeff" + json.dumps({"id": "q1", "question": "q?", "answers": ["a"]}) + "\n", encoding="utf-8")
    [ex] = load_all_examples(compose(["benchmark=jsonl", f"benchmark.path={own}"]).benchmark)
    assert (ex.id, ex.question) == ("q1", "q?")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('\ufeff{"id": "d1", "title": "a", "text": "ok"}\n', encoding="utf-8")
    assert [d.id for d in iter_corpus(corpus)] == ["d1"]
    musique = tmp_path / "musique.jsonl"
    musique.write_text("\ufeff" + json.dumps(musique_row("2hop__1")) + "\n", encoding="utf-8")
    [ex] = load_all_examples(compose(["benchmark=musique", f"benchmark.path={musique}"]).benchmark)
    assert ex.id == "2hop__1"


def test_unsupported_file_type(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, "x", name="bench.xml")
    one_line_error(code, err, "unsupported file type '.xml'")


def test_rows_missing_required_fields(monkeypatch, capsys, no_engine, tmp_path):
    code, _, err = _run_file(monkeypatch, capsys, tmp_path, json.dumps({"question": "q?"}) + "\n")
    one_line_error(code, err, "rows lack field(s)", "paragraphs")


def _fake_pool() -> EnginePool:
    return EnginePool(factory=lambda cfg: FakeBackend())


def test_rows_without_answers_or_question_are_counted_named_and_recorded(tmp_path, capsys):
    rows = [musique_row("2hop__1"), musique_row("2hop__2", answer=""), musique_row("2hop__3"), musique_row("2hop__4", question="  ")]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose(["benchmark=musique", f"benchmark.path={path}", "benchmark.calibration=0", f"results_dir={tmp_path / 'r'}"])
    with _fake_pool() as pool:
        res = run_cell(cfg, pool)
    warning = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1
    assert "dropped 2 of 4 rows" in warning[0] and "2hop__2" in warning[0] and "2hop__4" in warning[0]
    assert res.metrics["n"] == 2
    data = json.loads((res.folder / "metrics.json").read_text())["data"]
    assert data["loaded"] == 4 and data["kept"] == 2 and data["dropped"] == 2
    assert data["dropped_ids"] == {"no gold answer": ["2hop__2"], "empty question": ["2hop__4"]}


def test_a_row_without_documents_is_named(tmp_path):
    rows = [musique_row("2hop__1"), musique_row("2hop__2", paragraphs=0), musique_row("2hop__3")]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for candidates, expected in (("retrieved", r"1 example\(s\) have no documents.*2hop__2"), ("all", r"1 example\(s\) of musique ship none \(2hop__2\)")):
        cfg = compose(["benchmark=musique", f"benchmark.path={path}", f"benchmark.candidates={candidates}", "benchmark.calibration=0",
                       f"results_dir={tmp_path / 'r'}"])
        with _fake_pool() as pool:
            with pytest.raises(DataError, match=expected) as e:
                run_cell(cfg, pool)
        assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- #
# Engine output: long documents, broken agent replies, empty generations


class _Truncating(FakeBackend):
    """Flags prompts over 2,000 characters as cut to fit (what a real engine does)."""

    def chat(self, requests):
        out = super().chat(requests)
        return [Completion(**{**c.__dict__, "truncated": sum(len(m.content) for m in r.messages) > 2000}) for c, r in zip(out, requests)]


def test_document_longer_than_the_context_is_counted_and_warned(tmp_path, capsys):
    from madara_cli.core.records import Doc
    from madara_cli.data.mini import generate

    exs = generate(3)
    long_doc = Doc(id="huge", text="word " * 50_000)
    exs = [exs[0].__class__(**{**exs[0].__dict__, "docs": (long_doc, *exs[0].docs[1:])}), *exs[1:]]
    cfg = compose(["strategy=nf", f"results_dir={tmp_path}"])
    with EnginePool(factory=lambda cfg: _Truncating()) as pool:
        res = run_cell(cfg, pool, examples=exs)
    assert res.metrics["accounting"]["truncated"] >= 1
    warning = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "longer than the context" in warning[0] and "backend.n_ctx" in warning[0]


def test_unparseable_and_out_of_range_agent_output_is_a_counted_fallback(tmp_path):
    from madara_cli.data.mini import generate

    backend = FakeBackend(malformed=True)
    with EnginePool(factory=lambda cfg: backend) as pool:
        res = run_cell(compose(["strategy=three_agent", "strategy.conflict=per_document", f"results_dir={tmp_path}"]), pool, examples=generate(3))
    a = res.metrics["assessment"]
    assert backend.broken > 0 and a["parse_failure_rate"] == pytest.approx(backend.broken / backend.agent_replies)
    assert {"no_score", "out_of_range", "empty"} <= set(a["failures"])
    assert res.metrics["n"] == 3


class _Silent(FakeBackend):
    """Answers every generation with nothing at all."""

    def chat(self, requests):
        return [Completion(text="", tokens_in=5, tokens_out=0) for _ in requests]


def test_empty_generation_is_counted_not_fatal(tmp_path):
    from madara_cli.data.mini import generate

    with EnginePool(factory=lambda cfg: _Silent()) as pool:
        res = run_cell(compose(["strategy=nf", f"results_dir={tmp_path}"]), pool, examples=generate(4))
    assert res.metrics["n"] == 4 and res.metrics["em"] == 0.0
    assert res.metrics["empty_answers"] == 4


# --------------------------------------------------------------------------- #
# The response cache


def test_cache_file_that_is_not_a_database(monkeypatch, capsys, no_engine, tmp_path):
    results = tmp_path / "r"
    results.mkdir()
    (results / "cache.sqlite").write_bytes(b"this is not sqlite at all " * 100)
    code, _, err = cli("run", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, str(results / "cache.sqlite"), "mv ")
    assert "damaged" in line


def test_cache_with_damaged_pages_names_the_file(tmp_path):
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path)
    cache.put_many("fp", "chat", [(f"k{i}", Completion(text="x" * 500)) for i in range(400)])
    cache.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    raw = bytearray(path.read_bytes())
    raw[4096 * 3 : 4096 * 40] = b"\xff" * (4096 * 37)  # trash the b-tree pages, keep the header
    path.write_bytes(bytes(raw))
    with pytest.raises(CacheError) as e:
        c = ResponseCache(path)
        c.get_many([f"k{i}" for i in range(400)])
    assert str(path) in str(e.value) and "mv " in str(e.value) and "\n" not in str(e.value)


def _writer(path: str, start: int) -> None:
    cache = ResponseCache(path)
    for i in range(start, start + 60):
        cache.put_many("fp", "chat", [(f"k{i}", Completion(text=str(i)))])
    cache.close()


def test_two_processes_share_one_cache(tmp_path):
    path = str(tmp_path / "cache.sqlite")
    ResponseCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, s)) for s in (0, 30)]  # overlapping keys
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = ResponseCache(path)
    got = cache.get_many([f"k{i}" for i in range(90)])
    assert len(cache) == 90 and all(got[f"k{i}"].text == str(i) for i in range(90))
    cache.close()


def test_cache_hits_do_not_call_the_engine(tmp_path):
    backend = FakeBackend()
    llm = CachedLLM(backend, ResponseCache(tmp_path / "c.sqlite"))
    reqs = [ChatRequest(messages=(Message("user", f"q{i}"),)) for i in range(5)]
    llm.chat("s", reqs)
    calls = backend.chat_calls
    llm.chat("s", reqs)
    assert backend.chat_calls == calls


# --------------------------------------------------------------------------- #
# Results folders


def test_results_folder_not_writable(monkeypatch, capsys, no_engine, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = cli("run", "limit=1", f"results_dir={blocker / 'results'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "cannot use", str(blocker))
    code, _, err = cli("tables", "--results", str(tmp_path), "--out", str(blocker / "tables"), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "cannot use", str(blocker))


def test_results_folder_checked_before_work(tmp_path, monkeypatch):
    from madara_cli.data.mini import generate

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = compose(["strategy=nf", f"results_dir={blocker / 'r'}", f"cache={tmp_path / 'c.sqlite'}"])
    backend = FakeBackend()
    with EnginePool(factory=lambda cfg: backend) as pool:
        with pytest.raises(ConfigError, match=f"cannot use {blocker}: not a folder"):  # the user's setting: a ConfigError (the API's too)
            run_cell(cfg, pool, examples=generate(2))
    assert backend.chat_calls == 0


def test_truncated_metrics_json_is_reported_by_tables(monkeypatch, capsys, tmp_path):
    from madara_cli.data.mini import generate

    results = tmp_path / "r"
    with _fake_pool() as pool:
        res = run_cell(compose(["strategy=nf", f"results_dir={results}"]), pool, examples=generate(2))
    text = (res.folder / "metrics.json").read_text()
    (res.folder / "metrics.json").write_text(text[: len(text) // 2])
    code, out, err = cli("tables", "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "wrote" in out  # the other tables are written; the exit says one cell is missing
    line = one_line_error(code, err, res.folder.name, "not readable JSON")
    assert line.startswith("error:")


def test_a_results_path_with_markup_is_printed_as_it_is(monkeypatch, capsys, tmp_path):
    """``[/x]`` in the results path crashed run, show and tables in rich's markup parser
    after their work was written: nothing from a path or data is read as markup."""
    configs = tmp_path / "configs"
    (configs / "backend").mkdir(parents=True)
    (configs / "backend" / "toy.yaml").write_text("name: toy\nbatch_size: 4\nreply: Varnholt\n")
    results = tmp_path / "res[/x][bold]"
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    monkeypatch.setenv("MADARA_INCLUDE", "")
    monkeypatch.setenv("COLUMNS", "400")
    code, out, err = cli("--config-dir", str(configs), "--include", str(ROOT / "tests" / "plugins"),
                                 "run", "backend=toy", "strategy=nf", "benchmark=mini", "limit=2", "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "Traceback" not in err, err
    [cell] = [p for p in results.glob("*/*") if (p / "metrics.json").is_file()]
    assert str(cell) in out.replace("\n", "")
    code, out, err = cli("show", cell.name, "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and f"{cell.parent.name}/{cell.name} under {results}" in out, err
    code, out, err = cli("tables", "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    assert code in (0, 1) and "Traceback" not in err and "MarkupError" not in err, err
    assert "wrote" in out and "[/x][bold]" in out


def test_plot_names_torn_metrics_and_exits_1_like_tables(monkeypatch, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    from madara_cli.data.mini import generate

    results = tmp_path / "r"
    with _fake_pool() as pool:
        kept = run_cell(compose(["strategy=nf", f"results_dir={results}"]), pool, examples=generate(2))
        torn = run_cell(compose(["strategy=pde", f"results_dir={results}"]), pool, examples=generate(2))
    text = (torn.folder / "metrics.json").read_text()
    (torn.folder / "metrics.json").write_text(text[: len(text) // 2])
    code, out, err = cli("plot", "--results", str(results), "--format", "png", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and ".png" in out and "Traceback" not in err, (out, err)  # the readable cell is still drawn
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]  # the notes say which figures need a probe
    assert torn.folder.name in line and "not readable JSON" in line and "figures were drawn without them" in line
    assert kept.folder.name not in line


def test_duplicate_corpus_ids_stop_the_index_build(monkeypatch, capsys, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": "a", "title": "A", "text": "alpha"}, {"id": "b", "title": "B", "text": "beta"}, {"id": "a", "title": "A2", "text": "again"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_dir = tmp_path / "idx"
    code, _, err = cli("index", "build", "--corpus", str(corpus), "--out", str(out_dir), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]  # beside tqdm's progress bar
    assert str(corpus) in line and "document id 'a' appears twice" in line and "documents 1 and 3" in line
    assert not out_dir.exists() or not [p for p in out_dir.iterdir() if not p.name.startswith("file-digests")]


def test_finished_cell_survives_a_failed_forced_rerun(tmp_path):
    from madara_cli.core.errors import BackendError
    from madara_cli.data.mini import generate

    class Dying(FakeBackend):
        def chat(self, requests):
            raise BackendError("the server went away")

    cfg = compose(["strategy=nf", f"results_dir={tmp_path}"])
    with _fake_pool() as pool:
        res = run_cell(cfg, pool, examples=generate(2))
    before = (res.folder / "metrics.json").read_bytes()
    with EnginePool(factory=lambda cfg: Dying()) as pool:
        with pytest.raises(BackendError):
            run_cell(compose(["strategy=nf", f"results_dir={tmp_path}", "force=true", "cache=" + str(tmp_path / "other.sqlite")]), pool, examples=generate(2))
    assert (res.folder / "metrics.json").read_bytes() == before


# --------------------------------------------------------------------------- #
# Interrupts


_NAP = """
import time
from madara_cli import cli

@cli.app.command("nap")
def nap():
    print("ready", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_interrupt_prints_one_line_and_exits_128_plus_signal(sig, code, word):
    proc = spawn("nap", prelude=_NAP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    one_line_error(proc.returncode, err, f"{word}:", "rerun the same command to resume")


def _cached(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.llm
def test_sigint_mid_stage_keeps_the_cache_and_resumes(tmp_path):
    n = 10
    args = ["run", "strategy=nf", f"limit={n}", "backend.batch_size=1", "backend.n_threads=1", f"results_dir={tmp_path}"]
    proc = spawn(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _cached(tmp_path / "cache.sqlite") < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "rerun the same command to resume" in err
    done = _cached(tmp_path / "cache.sqlite")
    assert 2 <= done < n
    assert not list(tmp_path.glob("adhoc/*/metrics.json"))
    resumed = cli(*args)
    assert resumed.returncode == 0, resumed.stderr
    (m,) = list(tmp_path.glob("adhoc/*/metrics.json"))
    acct = json.loads(m.read_text())["accounting"]
    assert acct["cache_hits"] == done and acct["calls_issued"] == n - done


def test_a_grid_without_its_name_is_one_line(monkeypatch, capsys, no_engine, tmp_path):
    """A grid file that leaves out a setting every grid needs (``name``) was a traceback
    (OmegaConf's MissingMandatoryValue), in plan and run alike."""
    grids = tmp_path / "configs" / "grid"
    grids.mkdir(parents=True)
    (grids / "noname.yaml").write_text("axes:\n  strategy: [nf]\n")
    for verb in ("plan", "run"):
        code, _, err = cli("--config-dir", str(tmp_path / "configs"), verb, "--grid", "noname", f"results_dir={tmp_path / 'r'}",
                           monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, "bad grid noname.yaml: it has no 'name'")
    assert not (tmp_path / "r").exists()
