"""Several finished cells for one table cell: the tables and the report choose by a rule
they state (results/stored.py VARIANT_RULE); a table cell the rule leaves unsettled shows
'(N variants)' with the --prefer that picks each, and only --strict refuses the folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from madara_cli.results.stored import AmbiguousVariant, load_results
from madara_cli.tables.builders import TABLES
from tests.fakes import cli, one_line_error
from tests.results_fixtures import write_cell

SETTINGS = {"model.name": "smollm2-135m", "model.temperature": 0.6, "backend.name": "llamacpp", "benchmark.name": "mini",
            "strategy.name": "nf", "retriever.k": 10, "limit": None, "seed": 0, "metric_version": 3, "prompts": "675e84cf"}


def two_backends(root: Path, grid: str = "adhoc", other_grid: str = "adhoc") -> None:
    """One table cell (SmolLM2 × mini × NF), run on two engines: 50 % on vLLM, 25 % on llama.cpp."""
    write_cell(root, grid, "smollm2-135m", "mini", "nf", [0, 1], n=4, folder="nf__vllm", settings={**SETTINGS, "backend.name": "vllm"})
    write_cell(root, other_grid, "smollm2-135m", "mini", "nf", [0], n=4, folder="nf__llamacpp", settings=SETTINGS)


def _errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip()]


def test_tables_fill_what_they_can_and_show_an_unsettled_cell_with_its_candidates(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    write_cell(tmp_path, "adhoc", "smollm2-135m", "mini", "pde", [0, 1, 2], n=4, folder="pde", settings={**SETTINGS, "strategy.name": "pde"})
    code, out, err = cli("tables", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    (warning,) = [ln for ln in _errors(err) if ln.startswith("warning:")]
    assert warning.startswith("warning: smollm2-135m × mini × nf: 2 variants differing in backend.name, not guessed; pick one with")
    assert "`--prefer backend.name=vllm` (adhoc/nf__vllm)" in warning and "`--prefer backend.name=llamacpp` (adhoc/nf__llamacpp)" in warning
    text = (tmp_path / "tables" / "table1.md").read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if ln.startswith("| SmolLM2-135M | Mini"))
    assert "(2 variants) / n/a" in row and "75.0" in row  # NF unsettled; PDE, with one candidate, filled
    assert "(variants) smollm2-135m × mini × nf: 2 variants differing in backend.name" in text
    assert not (tmp_path / "tables" / "table1.md").read_text(encoding="utf-8").count("50.0 / n/a"), "no variant is guessed"


def test_strict_refuses_to_guess_and_lists_the_candidates(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    code, out, err = cli("tables", "--results", str(tmp_path), "--strict", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    first, *candidates = _errors(err)
    assert first.startswith("error: 2 variants of smollm2-135m × mini × nf could fill a table cell, differing in backend.name")
    assert "pick one with --prefer KEY=VALUE" in first and "Traceback" not in err
    assert sorted(c.split()[0:2] for c in candidates) == [["--prefer", "backend.name=llamacpp"], ["--prefer", "backend.name=vllm"]]
    assert all(str(tmp_path) in c for c in candidates)
    assert not (tmp_path / "tables").exists(), "a refusal writes no table"


def test_replicate_seeds_are_named_with_their_values(tmp_path: Path):
    write_cell(tmp_path, "adhoc", "smollm2-135m", "mini", "nf", [0, 1], n=4, folder="seed0", settings=SETTINGS)
    write_cell(tmp_path, "adhoc", "smollm2-135m", "mini", "nf", [0], n=4, folder="seed7", seed=7, settings={**SETTINGS, "seed": 7})
    df = TABLES["table1"].builder(load_results(tmp_path))
    assert str(df.iloc[-2]["NF"]).startswith("50.0")  # seed 0 fills the cell
    (note,) = [n for n in df.attrs["notes"] if n.startswith("Replicate seeds")]
    assert "smollm2-135m × mini × nf: seed 0 used (em 50.0%, n=4), set aside seed 7 (em 25.0%, n=4)" in note


def test_prefer_picks_a_variant_and_the_notes_name_it(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    code, out, err = cli("tables", "--results", str(tmp_path), "--only", "table1", "--prefer", "backend.name=vllm",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    text = (tmp_path / "tables" / "table1.md").read_text(encoding="utf-8")
    assert "| SmolLM2-135M | Mini | 50.0" in text  # the vLLM cell's EM
    assert "Variants used: smollm2-135m × mini × nf: backend.name=vllm (by --prefer backend.name=vllm; 1 other cell(s) set aside)" in text
    assert "Variants chosen by `--prefer backend.name=vllm`" in text
    # a group named alone means its name
    res = load_results(tmp_path, prefer=(("backend", "llamacpp"),))
    assert res.find("smollm2-135m", "mini", "nf").path.name == "nf__llamacpp"


def test_the_tables_own_grid_comes_first_and_is_stated(tmp_path: Path):
    two_backends(tmp_path, grid="table1", other_grid="adhoc")
    df = TABLES["table1"].builder(load_results(tmp_path))
    assert str(df.iloc[-2]["NF"]).startswith("50.0")  # the last row is the cost row
    (note,) = [n for n in df.attrs["notes"] if n.startswith("Variants used")]
    assert "backend.name=vllm (by the table's own grid table1; 1 other cell(s) set aside)" in note


def test_cells_of_one_variant_are_chosen_by_size_without_a_note(tmp_path: Path):
    write_cell(tmp_path, "adhoc", "smollm2-135m", "mini", "nf", [0], n=2, folder="small", limit=2, settings={**SETTINGS, "limit": 2})
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0, 1], n=4, folder="full", settings=SETTINGS)
    res = load_results(tmp_path)
    assert res.find("smollm2-135m", "mini", "nf").path.name == "full"  # a full run before a limit-ed one
    df = TABLES["table1"].builder(res)
    assert not [n for n in df.attrs["notes"] if n.startswith("Variants used")]


def test_a_preference_that_no_candidate_has_is_no_filter(tmp_path: Path):
    two_backends(tmp_path)
    with pytest.raises(AmbiguousVariant) as e:
        load_results(tmp_path, prefer=(("backend.name", "openai"),), strict=True).find("smollm2-135m", "mini", "nf")
    assert e.value.differing == ("backend.name",)
    assert not load_results(tmp_path, prefer=(("backend.name", "openai"),)).find("smollm2-135m", "mini", "nf")


def test_the_report_counts_unsettled_cells_at_the_top_and_states_the_variant_it_used(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    code, out, err = cli("report", "--results", str(tmp_path), "--strict", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and _errors(err)[0].startswith("error: 2 variants of smollm2-135m × mini × nf")
    assert not (tmp_path / "report" / "index.html").exists()
    code, out, err = cli("report", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert any(ln.startswith("warning: smollm2-135m × mini × nf: 2 variants") for ln in _errors(err))
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert page.index("1 table cell(s) have several variants") < page.index('id="story"')
    assert "(2 variants)" in page
    code, out, err = cli("report", "--results", str(tmp_path), "--prefer", "backend=llamacpp", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "Variants used: smollm2-135m × mini × nf: backend.name=llamacpp" in page and "several variants" not in page


@pytest.mark.parametrize("bad", ["backend", "=vllm", "backend="])
def test_a_malformed_prefer_is_one_line(tmp_path: Path, monkeypatch, capsys, bad):
    two_backends(tmp_path)
    code, out, err = cli("tables", "--results", str(tmp_path), "--prefer", bad, monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, f"--prefer {bad}: expected KEY=VALUE")
    assert code == 2


@pytest.mark.parametrize("verb", ["tables", "report"])
def test_a_prefer_key_no_cell_has_is_refused_naming_the_valid_ones(tmp_path: Path, monkeypatch, capsys, verb):
    """--prefer bogus.key=1 chose nothing without a word; a value of a real key no cell
    holds still sets nothing aside (test_a_preference_that_no_candidate_has_is_no_filter)."""
    two_backends(tmp_path)
    code, out, err = cli(verb, "--results", str(tmp_path), "--prefer", "bogus.key=1", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, "--prefer bogus.key=1: no cell in", "has a setting bogus.key; valid: ")
    assert code == 2 and "backend.name" in line and "grid" in line and "model.temperature" in line
    assert not (tmp_path / "tables").exists() and not (tmp_path / "report").exists()


def test_reproduce_warns_of_an_unsettled_cell_and_writes_the_tables(tmp_path: Path, monkeypatch, capsys):
    """The grids ran (their cells are on disk); the tables show the unsettled cell and a
    warning names the --prefer for each variant; exit 0, no traceback."""
    from madara_cli.commands import reproduce_verbs
    from madara_cli.tables.render import render_tables

    two_backends(tmp_path)

    def tables_only(backend, models, grids, results_dir, progress, overrides):
        written = render_tables(Path(results_dir), Path(results_dir) / "tables", only=["table1"], formats=("md",))
        return reproduce_verbs.ReproduceReport(tables=written.paths, unsettled=written.unsettled)

    monkeypatch.setattr(reproduce_verbs, "reproduce_all", tables_only)
    code, out, err = cli("reproduce", "--grids", "table1", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "Traceback" not in err
    (warning,) = [ln for ln in _errors(err) if ln.startswith("warning:")]
    assert "`--prefer backend.name=llamacpp`" in warning and "`--prefer backend.name=vllm`" in warning


def test_cells_of_one_variant_are_counted_as_one(tmp_path: Path):
    two_backends(tmp_path)
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0], n=2, folder="nf__llamacpp_small", limit=2, settings={**SETTINGS, "limit": 2})
    with pytest.raises(AmbiguousVariant) as e:
        load_results(tmp_path, strict=True).find("smollm2-135m", "mini", "nf")
    assert str(e.value).startswith("2 variants of smollm2-135m × mini × nf (3 cells) could fill a table cell")
    prefers = sorted(line.split()[1] for line in e.value.candidate_lines())
    assert prefers == ["backend.name=llamacpp", "backend.name=llamacpp", "backend.name=vllm"]
    chosen = load_results(tmp_path, prefer=(("backend.name", "llamacpp"),)).find("smollm2-135m", "mini", "nf")
    assert chosen.path.name == "nf__llamacpp"  # then the size rule: the full run
