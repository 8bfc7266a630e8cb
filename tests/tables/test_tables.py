"""Paper tables from a fake results folder: files, ours-beside-paper cells, missing cells, compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from madara_cli.tables import TABLES, compare_cells, figure2, load_results, write_tables
from madara_cli.tables.builders.main import table2
from madara_cli.tables.builders.musique import table17
from madara_cli.tables.builders.probe_diagnostics import table4
from madara_cli.tables.builders.significance import table14
from madara_cli.tables.compare import format_comparison
from madara_cli.tables.render import FORMATS, to_latex, to_markdown
from tests.results_fixtures import read_predictions, write_cell, write_predictions, write_probe


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    # Llama x CONFLICTS: NF right on q0, q1, q7 (30%); PDE right on q0..q6 (70%) -> b = 5, c = 1.
    write_cell(root, "table2", "llama-3.1-8b", "conflicts", "nf", [0, 1, 7], calls=10)
    write_cell(root, "table2", "llama-3.1-8b", "conflicts", "pde", list(range(7)), calls=290)
    write_cell(root, "table2", "llama-3.1-8b", "conflicts", "madara", list(range(7)), extra={i: {"route": "pde"} for i in range(10)})
    # The same cell run in another grid with a limit must lose to the table's own grid.
    write_cell(root, "table1", "llama-3.1-8b", "conflicts", "nf", [0], n=5)
    # An unfinished cell must be ignored.
    tmp = write_cell(root, "table2", "qwen3-8b", "conflicts", "nf", list(range(10)), folder=".tmp-qwen3")
    assert tmp.name.startswith(".tmp")
    write_probe(root, "llama-3.1-8b", "conflicts", [0.7, 0.4, 0.1], "quality-ordered", "pde")
    # MuSiQue chain coverage: q0..q3 chain-complete.
    support = {i: {"supporting_in_topk": i < 4} for i in range(10)}
    write_cell(root, "table6", "qwen2.5-7b", "musique", "pde", [0, 1, 2, 5], extra=support)
    write_cell(root, "table6", "qwen2.5-7b", "musique", "nf", [0, 5])
    write_cell(root, "table6", "qwen2.5-7b", "musique", "three_agent", [0, 1, 5, 6])
    return root


def test_every_table_is_written_in_every_format(results: Path, tmp_path: Path):
    out = tmp_path / "tables"
    written = write_tables(results, out)
    assert len(written) == len(TABLES) * len(FORMATS) + 1  # + all.long.csv
    for name in TABLES:
        for fmt in FORMATS:
            path = out / f"{name}.{'long.csv' if fmt == 'long' else fmt}"
            assert path.is_file() and path.stat().st_size > 0, path
    assert "\\begin{tabular}" in (out / "table2.tex").read_text()
    assert (out / "table2.csv").read_text().startswith("Model,Task,RSC")


def test_filled_cell_shows_ours_beside_paper(results: Path):
    df = table2(results)
    llama = df[(df["Model"] == "Llama-3.1-8B") & (df["Task"] == "Conflicts")].iloc[0]
    assert llama["NF"] == "30.0 / 13.9 (+16.1)"
    assert llama["MADARA EM"].startswith("70.0")
    assert "/ 50.2***" in llama["MADARA EM"]
    assert llama["ΔNF"] == "+40.0 / +36.3 (+3.7)"
    assert llama["Strategy"] == "PDE / PDE (=)"
    assert llama["RSC"] == "Quality-Ordered / Quality-Ordered (=)"
    assert llama["ρ̂1"] == "0.70 / 0.76 (−0.06)"


def test_empty_cell_shows_dash_and_grid(results: Path, tmp_path: Path):
    df = table2(results)
    qwen = df[(df["Model"] == "Qwen3-8B") & (df["Task"] == "Conflicts")].iloc[0]
    assert qwen["NF"] == "— / 60.8"  # the .tmp cell must not count
    assert any("madara run --grid table2" in note for note in df.attrs["notes"])
    md = to_markdown(df)
    assert "— / 60.8" in md and "madara run --grid table2" in md
    assert "madara run --grid table2" in to_latex(df).replace("\\texttt{", "")


def test_results_index_prefers_own_grid_and_skips_tmp(results: Path):
    res = load_results(results)
    assert all(not c.path.name.startswith(".tmp") for c in res.cells)
    assert res.find("llama-3.1-8b", "conflicts", "nf", grid="table2").grid == "table2"
    assert res.find("llama-3.1-8b", "conflicts", "nf", grid="table1").grid == "table1"
    assert res.find("qwen3-8b", "conflicts", "nf") is None


def test_table14_uses_per_example_predictions(results: Path):
    df = table14(results)
    row = df[(df["Model"] == "Llama-3.1-8B") & (df["Comparison"] == "PDE vs NF")].iloc[0]
    assert row["b"] == "5 / 97 (−92)"
    assert row["c"] == "1 / 11 (−10)"
    assert row["p (exact)"].startswith("0.219 / 2.4e-18")


def test_table4_reads_probe(results: Path):
    df = table4(results)
    row = df[(df["Model"] == "Llama-3.1-8B") & (df["Task"] == "Conflicts")].iloc[0]
    assert row["Shuffled"] == "0.70 / 0.76 (−0.06)"
    degenerate = df[(df["Model"] == "Llama-3.1-8B") & (df["Task"] == "TriviaQA")].iloc[0]
    assert "Degenerate (mean=0.17/5.0" in degenerate["RSC Class"]


def test_table17_splits_on_chain_coverage(results: Path):
    df = table17(results).set_index("Subset")
    assert df.loc["All queries", "PDE"].startswith("40.0 / 24.0")
    assert df.loc["Chain-complete†", "n"].startswith("4 / 23")
    assert df.loc["Chain-complete†", "PDE"].startswith("75.0 / 34.8")  # q0, q1, q2 of q0..q3
    assert df.loc["Chain-broken‡", "NF"].startswith("16.7 / 14.3")  # q5 of q4..q9


def test_compare_cells_counts_discordant_pairs(results: Path):
    pde = results / "table2" / "llama-3.1-8b__conflicts__pde__bm25s"
    nf = results / "table2" / "llama-3.1-8b__conflicts__nf__bm25s"
    out = compare_cells(pde, nf, n_resamples=500, seed=0)
    assert (out["n"], out["b"], out["c"]) == (10, 5, 1)
    assert out["em_a"] == pytest.approx(0.7) and out["em_b"] == pytest.approx(0.3)
    assert out["p_mcnemar_exact"] == pytest.approx(0.21875)
    assert out["ci_low"] <= 0.4 <= out["ci_high"]
    assert compare_cells(pde, nf, n_resamples=500, seed=0) == out
    assert "b = 5" in format_comparison(out)


def test_compare_cells_errors(results: Path, tmp_path: Path):
    nf = results / "table2" / "llama-3.1-8b__conflicts__nf__bm25s"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no predictions.jsonl"):
        compare_cells(nf, empty)
    other = results / "table6" / "qwen2.5-7b__musique__nf__bm25s"
    write_predictions(other, [{"id": "zz", "em": 1}])
    with pytest.raises(ValueError, match="share no example ids"):
        compare_cells(nf, other)


def test_a_table_is_declared_once_with_its_title_and_grids(results: Path):
    from madara_cli.tables.builders import ORDER
    from madara_cli.tables.declare import table

    assert tuple(TABLES) == ORDER and ORDER[:3] == ("table1", "table2", "table3") and ORDER[-1] == "table_j_hops"
    spec = TABLES["table3"]
    assert (spec.title, spec.grid, spec.also) == ("Table 3: RSC vs entropy-based routing", "table2", ("probes",))
    df = spec.builder(results)
    assert df.attrs["name"] == "table3" and df.attrs["title"] == spec.title and df.attrs["grid"] == "table2"
    assert "`madara run --grid table2` and `madara run --grid probes`" in df.attrs["notes"][-1]
    with pytest.raises(RuntimeError, match="table 'table3' is declared twice"):
        table("table3", "again", grid="table2")(lambda res, grid: ([], []))
    assert TABLES["table3"] is spec


def test_unknown_table_and_format(results: Path, tmp_path: Path):
    with pytest.raises(ValueError, match="valid: table1, table2"):
        write_tables(results, tmp_path / "t", only=["table99"])
    with pytest.raises(ValueError, match="valid: md, tex, csv"):
        write_tables(results, tmp_path / "t", formats=("html",))
    written = write_tables(results, tmp_path / "t", only=["2", "G.1"], formats=("md",))
    assert [p.name for p in written] == ["table2.md", "table_g1.md"]


def test_figure2(results: Path, tmp_path: Path):
    pytest.importorskip("matplotlib")
    assert figure2(tmp_path / "nothing", tmp_path / "fig") is None
    path = figure2(results, tmp_path / "fig")
    assert path is not None and path.name == "figure2.png" and path.stat().st_size > 1000


def test_table17_with_counts_and_hop_prefixed_ids(tmp_path: Path):
    root = tmp_path / "results"
    # The runner writes MuSiQue ids like "2hop__..." and supporting_in_topk as a count.
    counts = [2, 2, 1, 0, 2, 1, 1, 2, 0, 2]
    ids = [f"2hop__{i}" for i in range(10)]
    for strategy, correct in (("pde", [0, 1, 2, 4]), ("nf", [0]), ("three_agent", [0, 1, 2, 3])):
        cell = write_cell(
            root, "table6", "qwen2.5-7b", "musique", strategy, correct, ids=ids, extra={i: {"supporting_in_topk": counts[i]} for i in range(10)}
        )
        assert [r["id"] for r in read_predictions(cell)] == ids
    df = table17(root).set_index("Subset")
    # Complete chains (count 2): q0, q1, q4, q7, q9 -> PDE right on q0, q1, q4.
    assert df.loc["Chain-complete†", "n"].startswith("5 / 23")
    assert df.loc["Chain-complete†", "PDE"].startswith("60.0 / 34.8")
    assert df.loc["1 supporting in top-5", "n"].startswith("3 / n/a")
    assert df.loc["1 supporting in top-5", "3-Agent"].startswith("33.3 / 28.6")  # q2 of q2, q5, q6


def test_models_and_benchmarks_outside_the_paper_get_their_own_rows(tmp_path: Path):
    # What `make demo` leaves: the embedded model on the mini benchmark.
    root = tmp_path / "results"
    for strategy, correct in (("nf", [0]), ("pde", [0, 1, 2]), ("pde_random", [1])):
        write_cell(root, "demo", "smollm2-135m", "mini", strategy, correct, n=4)
    from madara_cli.tables import build_table

    t1 = build_table("table1", root)
    row = t1[t1["Model"] == "SmolLM2-135M"].iloc[0]
    assert row["Task"] == "Mini" and row["NF"] == "25.0 (F1 25.0, cont. 25.0) / n/a" and row["Full"] == "75.0 / n/a"
    assert row["Unif."].startswith("—")
    assert t1[t1["Model"] == "Llama-3.1-8B"].iloc[0]["NF"] == "— / 13.9"
    t2 = build_table("table2", root)
    assert (t2["Model"] == "SmolLM2-135M").sum() == 1
