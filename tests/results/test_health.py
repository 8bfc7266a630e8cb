"""The health of a cell (results/health.py): counted once by the runner, recorded beside
its numbers, judged by ``health.*``, and shown wherever the numbers appear."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.core.errors import DegradedCell
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.experiment.runner import run_cell
from madara_cli.results.health import MARK, Health, HealthRule, StageHealth, cell_health, health_line
from madara_cli.results.outputs import CellRecord
from madara_cli.results.record_files import read_cell
from tests.fakes import FakeBackend, cli
from tests.results_fixtures import write_cell

# What `madara run strategy=three_agent limit=1` recorded on the embedded model (issue 36):
# 28 of 30 scores unreadable, 18 replies cut at the token budget.
SMOLLM_ASSESSMENT = {
    "mode": "generate", "cot": False, "n_scores": 30, "n_valid": 2, "parse_failure_rate": 28 / 30,
    "failures": {"no_score": 26, "out_of_range": 2},
    "by_agent": {"relevance": {"n_scores": 10, "n_valid": 2}, "consistency": {"n_scores": 10, "n_valid": 0},
                 "conflict": {"n_scores": 10, "n_valid": 0}},
    "conflict": {"calls": "per_query", "replies": 21, "missing_ids": 0, "extra_ids": 0},
}
SMOLLM_ACCOUNTING = {"requests": 22, "cut_at_max_tokens": 18, "by_stage": {
    "score": {"requests": 20, "cut_at_max_tokens": 16}, "score-conflict": {"requests": 1, "cut_at_max_tokens": 1},
    "generate": {"requests": 1, "cut_at_max_tokens": 1}}}


def test_the_embedded_models_three_agent_cell_is_degraded_by_stage():
    health = cell_health({"assessment": SMOLLM_ASSESSMENT}, SMOLLM_ACCOUNTING)
    assert health.status == "degraded"
    by_stage = {s.stage: (s.scores, s.parsed, s.imputed, s.cut_at_max_tokens) for s in health.stages}
    assert by_stage == {"score": (20, 2, 18, 16), "score-conflict": (10, 0, 10, 1)}  # the answers' stage holds no score
    assert health.imputed == 28 and health.scores == 30
    # one line naming the worst stage and its cause
    assert health.reason.startswith("stage score-conflict: 10 of 10 scores imputed")
    assert "cut at the token budget generation.score_max_tokens" in health.reason and "1 more stage" in health.reason


def test_a_detector_reply_that_leaves_documents_out_is_named_as_the_cause():
    assessment = {**SMOLLM_ASSESSMENT, "by_agent": {"relevance": {"n_scores": 10, "n_valid": 10}, "consistency": {"n_scores": 10, "n_valid": 10},
                                                    "conflict": {"n_scores": 10, "n_valid": 2}},
                  "conflict": {"calls": "per_query", "missing_ids": 8}}
    health = cell_health({"assessment": assessment}, {"by_stage": {"score-conflict": {"cut_at_max_tokens": 0}}})
    (conflict,) = health.over()
    assert (conflict.stage, conflict.imputed, conflict.missing_id) == ("score-conflict", 8, 8)
    assert "8 document(s) missing an id in the detector's replies" in health.reason


def test_a_detector_asked_per_document_counts_in_the_scoring_stage():
    assessment = {**SMOLLM_ASSESSMENT, "conflict": {"calls": "per_document", "missing_ids": 0}}
    (stage,) = cell_health({"assessment": assessment}, SMOLLM_ACCOUNTING).stages
    assert (stage.stage, stage.scores, stage.imputed) == ("score", 30, 28)


def test_the_threshold_is_more_than_a_share_of_one_stage():
    stages = (StageHealth("score-cot", 20, 18),)  # 10% imputed
    assert Health("ok", stages).judged(HealthRule(max_imputed=0.10)).status == "ok"  # "more than", not "at least"
    assert Health("ok", stages).judged(HealthRule(max_imputed=0.05)).status == "degraded"
    assert Health("degraded", stages, 0.05).judged(HealthRule()).status == "ok"  # judged again by today's rule


def test_main_rags_unread_judge_scores_count():
    health = cell_health({"main_rag": {"judge_failure_rate": 0.25}}, {"by_stage": {"main-rag-judge": {"requests": 40}}})
    (stage,) = health.stages
    assert (stage.stage, stage.scores, stage.imputed, health.status) == ("main-rag-judge", 40, 10, "degraded")


def test_a_cell_that_scores_nothing_is_ok_and_one_that_says_too_little_is_unknown():
    assert cell_health({}, {"by_stage": {"generate": {"requests": 5}}}).status == "ok"
    assert cell_health({"assessment": {"parse_failure_rate": 0.0}}, {}).status == "unknown"  # no per-agent counts
    assert cell_health({}, {"by_stage": {"score": {"requests": 5}}}).status == "unknown"  # scored, no section says how


def test_health_is_recorded_after_the_accounting_and_read_back(tmp_path: Path):
    health = cell_health({"assessment": SMOLLM_ASSESSMENT}, SMOLLM_ACCOUNTING)
    base = {"cell": {"model": "m", "benchmark": "b", "strategy": "three_agent"}, "n": 1, "em": 0.0, "assessment": SMOLLM_ASSESSMENT,
            "accounting": SMOLLM_ACCOUNTING}
    record = CellRecord.from_dict(base, "g", "k")
    assert record.health == health and not record.health.recorded  # an older record: derived, not written back
    assert "health" not in record.to_dict()
    written = CellRecord(cell=record.cell, n=1, em=0.0, report=record.report, accounting=record.accounting, health=health).to_dict()
    keys = list(written)
    assert keys.index("health") == keys.index("accounting") + 1 and "health" not in written.get("assessment", {})
    assert written["health"]["stages"]["score"] == {"scores": 20, "parsed": 2, "imputed": 18, "cut_at_max_tokens": 16, "missing_id": 0}
    again = CellRecord.from_dict(json.loads(json.dumps(written)), "g", "k")
    assert again.health == health and again.health.recorded and again.to_dict() == written


def test_health_settings_move_no_key():
    plain = cell_from_cfg(compose(["strategy=three_agent"])).key
    assert cell_from_cfg(compose(["strategy=three_agent", "health.on_degraded=fail", "health.max_imputed=0.5"])).key == plain


@pytest.mark.parametrize("override, needle", [("health.on_degraded=publish", "valid: warn, fail"),
                                              ("health.max_imputed=1.5", "expected a number in [0, 1]")])
def test_a_bad_health_setting_fails_at_compose(override, needle):
    from madara_cli.core.errors import ConfigError

    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        compose([override])


def _degraded_run(tmp_path: Path, *extra: str):
    from madara_cli.data.mini import generate

    with EnginePool(factory=lambda cfg: FakeBackend(malformed=True)) as pool:
        return run_cell(compose(["strategy=three_agent", f"results_dir={tmp_path}", *extra]), pool, examples=generate(3))


def test_the_runner_records_a_degraded_cell_and_warns_once(tmp_path: Path, capsys):
    res = _degraded_run(tmp_path)
    assert res.record.health.degraded and res.record.health.recorded
    stored = json.loads((res.folder / "metrics.json").read_text())
    assert stored["health"]["status"] == "degraded" and stored["health"]["reason"] == res.record.health.reason
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "degraded" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "stage score" in warnings[0]
    assert "health.on_degraded=fail" in warnings[0]


def test_on_degraded_fail_writes_nothing_and_refuses_a_finished_one_too(tmp_path: Path):
    with pytest.raises(DegradedCell, match=r"degraded: stage score.*health.on_degraded=fail refuses it \(nothing written"):
        _degraded_run(tmp_path / "strict", "health.on_degraded=fail")
    assert not list((tmp_path / "strict").glob("adhoc/*")), "a refused cell leaves no folder"
    done = _degraded_run(tmp_path / "loose")  # written under the default warn
    with pytest.raises(DegradedCell, match="finished earlier, and degraded"):
        _degraded_run(tmp_path / "loose", "health.on_degraded=fail")
    assert read_cell(done.folder) is not None  # the finished cell stays as it was
    assert not _degraded_run(tmp_path / "loose", "health.max_imputed=1.0").record.health.judged(HealthRule(1.0)).degraded


def _fake_engine(monkeypatch):
    from madara_cli.experiment import engines

    monkeypatch.setattr(engines, "make_backend", lambda cfg: FakeBackend(malformed=True))
    monkeypatch.setattr(engines.EnginePool.__init__, "__defaults__", (None, lambda cfg: FakeBackend(malformed=True), engines.ResponseCache))


def test_a_degraded_cell_shows_in_the_run_table_show_summary_tables_and_report(tmp_path: Path, monkeypatch, capsys):
    _fake_engine(monkeypatch)
    res = tmp_path / "r"
    code, out, err = cli("run", "strategy=three_agent", "limit=2", f"results_dir={res}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert [ln for ln in err.splitlines() if ln.startswith("warning:") and "degraded: stage" in ln]
    assert " degraded " in next(ln for ln in out.splitlines() if ln.startswith("smollm2-135m"))
    code, out, _ = cli("run", "strategy=three_agent", "limit=2", f"results_dir={res}", env={"COLUMNS": "250"},
                       monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "done earlier, degraded" in out
    # madara show: the health row on the first screen
    code, out, _ = cli("show", "three_agent", "--results", str(res), monkeypatch=monkeypatch, capsys=capsys)
    health = next(ln for ln in out.splitlines() if ln.lstrip().startswith("health "))
    assert code == 0 and "degraded: stage score" in health and out.splitlines().index(health) < 10
    # summary.csv
    (row,) = list(csv.DictReader((res / "summary.csv").open()))
    assert row["health"] == "degraded" and row["health_stage"].startswith("score") and int(row["scores_imputed"]) > 0
    # every paper table that shows the cell marks it and says why
    code, out, err = cli("tables", "--results", str(res), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    table2 = (res / "tables" / "table2.md").read_text(encoding="utf-8")
    assert f"{MARK} (F1" in table2 or f"{MARK} /" in table2
    assert f"- {MARK} rests on a degraded cell" in table2 and "smollm2-135m × mini × three_agent (stage score" in table2
    assert r"$^\diamond$" in (res / "tables" / "table2.tex").read_text(encoding="utf-8")
    code, out, err = cli("report", "--results", str(res), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    page = (res / "report" / "index.html").read_text(encoding="utf-8")
    assert '<span class="degraded">degraded</span>: stage score' in page and MARK in page


def test_on_degraded_fail_exits_non_zero_in_one_line(tmp_path: Path, monkeypatch, capsys):
    _fake_engine(monkeypatch)
    code, out, err = cli("run", "strategy=three_agent", "limit=2", f"results_dir={tmp_path}", "health.on_degraded=fail",
                         monkeypatch=monkeypatch, capsys=capsys)
    (line,) = [ln for ln in err.splitlines() if " INFO " not in ln and ln.strip()]  # the progress log, then one line
    assert line.startswith("error: ") and "degraded: stage score" in line and "health.on_degraded=fail refuses it" in line
    assert code == 2 and not list(tmp_path.glob("adhoc/*/metrics.json")) and "Traceback" not in err


def test_a_card_names_its_degraded_cells(tmp_path: Path):
    from madara_cli.results.stored import load_results
    from madara_cli.tables.story import cards, health_text, treat_line
    from tests.results_fixtures import write_probe

    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0], n=4)
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "sda", [0, 1], n=4, assessment=SMOLLM_ASSESSMENT, accounting=SMOLLM_ACCOUNTING)
    write_probe(tmp_path, "smollm2-135m", "mini", route="sda", reason="stochastic → SDA")
    (card,) = cards(load_results(tmp_path))
    assert health_text(card).startswith("routed cell degraded (stage score-conflict: 10 of 10")
    assert "routed cell degraded" in treat_line(card)


def test_table2_marks_a_degraded_madara_cell_its_gain_and_its_card(tmp_path: Path):
    """Table 2's MADARA EM and ΔNF rest on the madara cell: marked as Table G.1 marks it."""
    from madara_cli.results.stored import load_results
    from madara_cli.tables.builders import TABLES
    from madara_cli.tables.story import cards, treat_line
    from tests.results_fixtures import write_probe

    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0], n=4)
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "madara", [0, 1], n=4, assessment=SMOLLM_ASSESSMENT, accounting=SMOLLM_ACCOUNTING)
    write_probe(tmp_path, "smollm2-135m", "mini", route="sda", reason="stochastic → SDA")
    res = load_results(tmp_path)
    df = TABLES["table2"].builder(res)
    row = df[df["Model"] == "SmolLM2-135M"].iloc[0]
    assert str(row["MADARA EM"]).startswith(f"50.0{MARK}") and str(row["ΔNF"]).startswith(f"+25.0{MARK}")
    (card,) = cards(res)
    assert f"EM 50.0%{MARK} vs NF 25.0%" in treat_line(card)


def test_compare_says_which_way_delta_runs_and_flags_a_degraded_cell(tmp_path: Path, monkeypatch, capsys):
    a = write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0, 1, 2], n=4)
    b = write_cell(tmp_path, "demo", "smollm2-135m", "mini", "sda", [0], n=4, assessment=SMOLLM_ASSESSMENT, accounting=SMOLLM_ACCOUNTING)
    code, out, err = cli("compare", str(a), str(b), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "Δ = A − B (positive: A scores higher)" in lines[2]
    assert "A 75.0% " in lines[3] and f"B 25.0%{MARK}" in lines[3] and "Δ(A−B) +50.0pp" in lines[3]
    assert lines[1].endswith(f"{MARK} degraded: {read_cell(b).health.reason}") and MARK not in lines[0]
    code, out, _ = cli("compare", "--help", monkeypatch=monkeypatch, capsys=capsys)
    assert "Δ = A − B" in " ".join(out.split())


def _row(out: str, label: str) -> str:
    """The text of ``madara show``'s summary row ``label``."""
    (line,) = [ln for ln in out.splitlines() if ln.split()[:1] == [label]]
    return line.strip().removeprefix(label).strip()


def test_old_records_read_fine_in_summary_and_show(tmp_path: Path, monkeypatch, capsys):
    folder = write_cell(tmp_path, "adhoc", "m", "b", "nf", [0], n=2, assessment={})
    vague = write_cell(tmp_path, "adhoc", "m", "b", "three_agent", [0], n=2)  # an assessment without per-agent counts
    code, out, _ = cli("show", str(folder), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and _row(out, "health").startswith("ok: no scores to read")
    code, out, _ = cli("show", str(vague), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and _row(out, "health").startswith("unknown: the record does not say")
    from madara_cli.results.summary import cell_rows

    rows = {r["strategy"]: r for r in cell_rows(tmp_path)}
    assert (rows["nf"]["health"], rows["nf"]["scores"]) == ("ok", 0)
    assert (rows["three_agent"]["health"], rows["three_agent"]["scores"]) == ("unknown", None)
    assert health_line(read_cell(folder)).endswith("(derived from a record written before madara recorded health)")


@pytest.mark.llm
def test_three_agent_on_the_embedded_model_ends_degraded_and_says_so(tmp_path: Path):
    """The issue's command on SmolLM2-135M: most of its 30 scores cannot be read today."""
    res = tmp_path / "r"
    # 22 engine calls of up to 64 tokens on CPU: minutes on a busy machine
    code, out, err = cli("run", "strategy=three_agent", "limit=1", f"results_dir={res}", env={"COLUMNS": "250"}, timeout=1800)
    assert code == 0, err
    (warning,) = [ln for ln in err.splitlines() if ln.startswith("warning:") and "degraded: stage" in ln]
    assert " degraded " in next(ln for ln in out.splitlines() if ln.startswith("smollm2-135m"))
    code, out, _ = cli("show", "three_agent", "--results", str(res))
    assert _row(out, "health").startswith("degraded")
    (row,) = list(csv.DictReader((res / "summary.csv").open()))
    assert row["health"] == "degraded"
    assert cli("tables", "--results", str(res), "--only", "table2").returncode == 0
    assert f"- {MARK} rests on a degraded cell" in (res / "tables" / "table2.md").read_text(encoding="utf-8")
    assert cli("report", "--results", str(res)).returncode == 0
    assert '<span class="degraded">degraded</span>' in (res / "report" / "index.html").read_text(encoding="utf-8")
