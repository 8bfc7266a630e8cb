"""The results files: typed records written and read back unchanged, files from before
the store (no ``schema_version``) still read, and no module outside ``results/`` opening
a results file itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.config.identity import Cell
from madara_cli.core.errors import RecordError
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from madara_cli.results import record_files, stored, summary
from madara_cli.results.outputs import SCHEMA_VERSION, CellRecord, ProbeRecord
from tests.conftest import ROOT
from tests.fakes import FakeBackend

RESULT_FILES = ("metrics.json", "probe.json", "predictions.jsonl")


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants in code: docstrings left out (comments never reach the AST)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_only_the_results_store_names_results_files():
    package = ROOT / "madara_cli"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(package / "results"):
            continue
        for line, text in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            offenders += [f"{path.relative_to(ROOT)}:{line}: {name}" for name in RESULT_FILES if name in text]
    assert not offenders, "open results files through madara_cli.results.record_files:\n" + "\n".join(offenders)


def test_the_scan_sees_code_strings_but_not_docstrings():
    tree = ast.parse('"""probe.json in a docstring"""\nPATH = "x/metrics.json"  # probe.json in a comment\n')
    assert [t for _, t in _code_strings(tree)] == ["x/metrics.json"]


def _cell(results: Path, *overrides: str):
    pool = EnginePool(factory=lambda cfg: FakeBackend())
    try:
        return run_cell(compose(["strategy=pde", "limit=3", f"results_dir={results}", "grid_name=demo", *overrides]), pool)
    finally:
        pool.close()


def test_cell_record_round_trips_through_its_file(tmp_path):
    res = _cell(tmp_path)
    text = (res.folder / record_files.METRICS_FILE).read_text(encoding="utf-8")
    assert text == res.record.to_json()
    data = json.loads(text)
    assert list(data)[0] == "schema_version" and data["schema_version"] == SCHEMA_VERSION
    assert list(data)[-2:] == ["provenance", "timing"]
    back = record_files.read_cell(res.folder)
    assert back == res.record and back.key == res.cell.key and back.cell == res.cell
    # The strategy's own sections stay where the strategy put them, typed views read them.
    assert {"selection", "pde"} <= set(back.report) and back.report == res.record.report
    assert back.calibration_split == "nested" and back.n == 3
    assert record_files.read_predictions(res.folder)[0]["id"] == json.loads((res.folder / record_files.PREDICTIONS).read_text().splitlines()[0])["id"]
    assert record_files.read_cell(tmp_path / "demo" / "nothing-here") is None


def test_a_v1_cell_file_reads_and_rewrites_byte_identically_apart_from_the_version(tmp_path):
    res = _cell(tmp_path)
    path = res.folder / record_files.METRICS_FILE
    new_text = path.read_text(encoding="utf-8")
    old = json.loads(new_text)
    del old["schema_version"]  # what madara wrote before the store, the way it wrote it
    path.write_text(json.dumps(old, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    back = record_files.read_cell(res.folder)
    assert back.schema_version == 1 and back == res.record
    assert back.to_json() == new_text


def test_an_older_cell_without_newer_sections_still_reads(tmp_path):
    folder = tmp_path / "table2" / "old-cell"
    folder.mkdir(parents=True)
    old = {"cell": {"model": "m", "benchmark": "b", "strategy": "nf"}, "n": 4, "em": 0.5, "f1": 0.6, "contains": 0.75,
           "assessment": {"extreme_score_rate": 0.1}, "wall_seconds": 3.5, "accounting": {"calls_issued": 4, "seconds": 1.5}}
    (folder / record_files.METRICS_FILE).write_text(json.dumps(old))
    rec = record_files.read_cell(folder)
    assert (rec.grid, rec.key, rec.retriever, rec.em_strict, rec.timing) == ("table2", "old-cell", "bm25s", None, None)
    assert rec.assessment == {"extreme_score_rate": 0.1} and rec.seconds == 3.5 and rec.engine_seconds == 1.5
    assert rec.calls_per_query() == 1.0
    # Written back, it keeps what it had and says nothing it did not know.
    again = CellRecord.from_json(rec.to_json(), grid="table2", key="old-cell")
    assert again == rec and "em_strict" not in json.loads(rec.to_json())


def test_a_metric_version_2_cell_reads_its_two_ems_under_todays_names(tmp_path):
    # Version 2 wrote em = the strict match, em_squad = the SQuAD one (today's em).
    res = _cell(tmp_path)
    metrics_path, preds_path = res.folder / record_files.METRICS_FILE, res.folder / record_files.PREDICTIONS
    old = json.loads(metrics_path.read_text(encoding="utf-8"))
    old.pop("em_strict")
    old["em"], old["em_squad"] = 0.25, 0.75
    metrics_path.write_text(json.dumps(old, indent=2), encoding="utf-8")
    rows = [json.loads(x) for x in preds_path.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row.pop("em_strict")
        row["em"], row["em_squad"] = 0, int(i == 0)
    preds_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    rec = record_files.read_cell(res.folder)
    assert (rec.em, rec.em_strict) == (0.75, 0.25) and rec.metric("em_squad") == 0.75
    assert "em_squad" not in rec.report and "em_squad" not in json.loads(rec.to_json())
    back = record_files.read_predictions(res.folder)
    assert [(r["em"], r["em_strict"]) for r in back] == [(int(i == 0), 0) for i in range(len(rows))]
    assert all("em_squad" not in r for r in back)
    summary.write_summary(tmp_path)
    import pandas as pd

    row = pd.read_csv(tmp_path / "summary.csv").iloc[0]
    assert (row["em_pct"], row["em_strict_pct"]) == (75.0, 25.0) and "em_squad" not in row and "em" not in row


@pytest.mark.parametrize("body,needle", [
    ("{truncated", "is not readable JSON"),
    ('{"schema_version": 99, "cell": {"model": "m", "benchmark": "b", "strategy": "nf"}}', "newer madara"),
    ('{"n": 3}', "no cell section"),
])
def test_unreadable_cell_records_are_one_line_errors(tmp_path, body, needle):
    folder = tmp_path / "g" / "cell"
    folder.mkdir(parents=True)
    (folder / record_files.METRICS_FILE).write_text(body)
    with pytest.raises(RecordError, match=needle) as e:
        record_files.read_cell(folder)
    assert "\n" not in str(e.value)
    assert str(folder) in stored.load_results(tmp_path).skipped


def _full_probe() -> dict:
    """A probe record in the layout run_probe writes (every section present)."""
    return {
        "model": "qwen2.5-7b", "benchmark": "conflicts", "n": 4, "key": "qwen2.5-7b__conflicts__n4__abcd1234", "config_hash": "abcd1234",
        "rho": [0.9, 0.5, 0.1], "p_values": [1e-5, 0.01, 0.4], "rho_star": -1.0, "rho_bar": 0.5, "rsc_class": "quality-ordered",
        "coupling": "strong",
        "per_query": {"mean": [0.8, 0.4, 0.0], "std": [0.1, 0.2, 0.3], "values": [[0.8, 0.8], [0.4, 0.4], [0.0, 0.0]]},
        "bootstrap": {"ci": [[0.8, 1.0], [0.3, 0.6], [-0.1, 0.2]], "stability": 0.97, "class_shares": {"quality-ordered": 0.97}, "n_resamples": 100},
        "split_half": {"first": "quality-ordered", "last": "stochastic"},
        "subsets30": {"quality-ordered": 80.0, "stochastic": 20.0, "degenerate": 0.0, "size": 30, "n_subsets": 100},
        "degenerate": {"is_degenerate": False, "floor_share": 0.1, "ceiling_share": 0.05, "mean_score": 2.5, "reason": ""},
        "entropy": 1.2, "n_queries": 4, "n_pairs": 40, "seed": 0, "em_nf": 0.25, "route": "pde", "reason": "EM_NF < 30% → isolate (ρ̂ …)",
        "scores": {"normal": [1.0, None, 3.0], "parse_failures_normal": 1, "parse_failures_rescored": 0, "n_pairs": 40, "chains_from_raw_text": 2},
        "calibration": {"n": 4, "split": "nested", "rule": "first 4 queries of the seeded order (seed 0)"},
        "accounting": {"requests": 10}, "timing": {"wall_seconds": 1.0}, "provenance": {"madara_version": "0"},
    }


def test_probe_record_round_trips_and_reads_v1_files_unchanged(tmp_path):
    old = _full_probe()
    folder = tmp_path / "probes" / old["key"]
    folder.mkdir(parents=True)
    v1_text = json.dumps(old, indent=2, allow_nan=False) + "\n"  # how probes were written before the store
    (folder / record_files.PROBE_FILE).write_text(v1_text, encoding="utf-8")
    rec = record_files.read_probe(folder)
    assert rec.schema_version == 1 and rec.path == folder / record_files.PROBE_FILE
    assert rec.to_json() == v1_text.replace("{\n", '{\n  "schema_version": 2,\n', 1)
    # Typed access in place of key paths.
    assert rec.rho_at(1) == 0.5 and rec.rho_at(5) is None and rec.ci_at(0) == (0.8, 1.0) and rec.per_query_at(2) == (0.0, 0.3)
    assert rec.subsets30.quality_ordered == 80.0 and rec.split_half.last == "stochastic" and not rec.is_degenerate
    assert rec.scores.chains_from_raw_text == 2 and rec.calibration.split == "nested" and rec.stability == 0.97
    # Written by the store, read back equal.
    path = record_files.write_probe(tmp_path / "again", rec)
    assert record_files.read_probe(path) == rec and path.read_text(encoding="utf-8") == rec.to_json()
    (index_probe,) = stored.load_results(tmp_path).probes
    assert index_probe == rec and index_probe.path == folder / record_files.PROBE_FILE


def test_probe_keys_it_does_not_know_are_kept():
    data = {**_full_probe(), "future_section": {"x": 1}}
    data["degenerate"]["new_share"] = 0.5
    rec = ProbeRecord.from_dict(data)
    assert rec.extra == {"future_section": {"x": 1}} and rec.degenerate.extra == {"new_share": 0.5}
    assert ProbeRecord.from_dict(rec.to_dict()) == rec


def test_probe_files_missing_what_routing_needs_are_one_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"route": "pde"}')
    with pytest.raises(RecordError, match="lacks reason, em_nf, rsc_class") as e:
        record_files.read_probe(path, require=("route", "reason", "em_nf", "rsc_class"))
    assert "\n" not in str(e.value)
    path.write_text("[1, 2]")
    with pytest.raises(RecordError, match="lacks route"):
        record_files.read_probe(path, require=("route",))
    assert record_files.read_probe(tmp_path / "absent") is None


def test_index_reads_what_the_runner_wrote(tmp_path):
    res = _cell(tmp_path)
    (cell,) = stored.load_results(tmp_path, metric="contains").cells
    assert (cell.model, cell.strategy, cell.key, cell.n) == (res.cell.model, "pde", res.cell.key, 3)
    assert cell.em == res.record.contains and cell.outcome_metric == "contains" and cell.record == res.record
    assert cell.predictions() == record_files.read_predictions(res.folder)
    assert record_files.find_cell(tmp_path, res.cell.config_hash) == res.folder
    name, rec = record_files.read_record(res.folder)
    assert name == record_files.METRICS_FILE and rec == res.record
    (row,) = summary.cell_rows(tmp_path)
    assert row["key"] == res.cell.key and "schema_version" not in row and row["em_pct"] == 100 * res.record.em


def test_cell_identity_is_the_grid_cell():
    cell = Cell("g", "m", "b", "nf", "bm25s", 5, 0, 3, "deadbeef")
    rec = CellRecord(cell=cell, n=3, em=1.0)
    assert CellRecord.from_dict(rec.to_dict()).cell == cell


def test_support_in_topk_reads_the_canonical_form_and_every_older_one():
    from madara_cli.results.stored import Support, support_in_topk

    def row(value, id_="q", **extra):
        return {"id": id_, "extra": {"supporting_in_topk": value, **extra}}

    assert support_in_topk(row(2, n_supporting=3)) == Support(2, False)  # what madara writes
    assert support_in_topk(row(3, n_supporting=3)) == Support(3, True)
    assert support_in_topk(row(True)) == Support(None, True)
    assert support_in_topk(row(2, "2hop__123_456")) == Support(2, True)
    assert support_in_topk(row(2, "3hop1__1_2_3")) == Support(2, False)
    assert support_in_topk(row(None, "2hop__1")) == Support(None, None)
    assert support_in_topk(row([True, False])) == Support(1, False)
    assert support_in_topk(row(0.5, n_supporting=4)) == Support(2, False)
    assert support_in_topk({"id": "q"}) == Support(None, None)


def test_cli_prints_full_and_degenerate_probe_records(capsys):
    from rich.console import Console

    from madara_cli.commands.probe_verbs import print_probe
    from madara_cli.commands.run_verbs import probes_table

    full = ProbeRecord.from_dict(_full_probe())
    print_probe(full, Path("p"), reused=True)
    text = capsys.readouterr().out
    assert "RSC probe: qwen2.5-7b on conflicts (n=4) — reused" in text and "[0.80, 1.00]" in text and "0.80 ± 0.10" in text
    assert "route: pde" in text and "EM_NF 25.0%" in text and "parse failures: CoT 1/40" in text

    degenerate = ProbeRecord.from_dict({**_full_probe(), "rho": None, "p_values": None, "rsc_class": "degenerate", "per_query": None,
                                        "bootstrap": None, "scores": None,
                                        "degenerate": {"is_degenerate": True, "floor_share": 0.9, "ceiling_share": 0.0, "mean_score": 0.2,
                                                       "reason": "90% at the floor"}})
    print_probe(degenerate, Path("p"), reused=False)
    text = capsys.readouterr().out
    assert "degenerate scoring: floor 90%" in text and "90% at the floor" in text and "class: degenerate" in text
    console = Console(width=200, record=True)
    console.print(probes_table([(full, Path("p"), True), (degenerate, Path("q"), False)], "probes"))
    rows = console.export_text()
    assert "0.90" in rows and "25.0" in rows and "done earlier" in rows and "—" in rows
