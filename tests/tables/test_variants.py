"""Several finished cells for one table cell: the tables and the report choose by a rule
they state (results/stored.py VARIANT_RULE), or refuse to guess and list the candidates."""

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


def test_tables_refuse_to_guess_between_two_backends_and_list_the_candidates(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    code, out, err = cli("tables", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    first, *candidates = _errors(err)
    assert first.startswith("error: 2 variants of smollm2-135m × mini × nf could fill a table cell, differing in backend.name")
    assert "pick one with --prefer KEY=VALUE" in first and "Traceback" not in err
    assert sorted(c.split()[0:2] for c in candidates) == [["--prefer", "backend.name=llamacpp"], ["--prefer", "backend.name=vllm"]]
    assert all(str(tmp_path) in c for c in candidates)
    assert not (tmp_path / "tables").exists(), "a refusal writes no table"


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
        load_results(tmp_path, prefer=(("backend.name", "openai"),)).find("smollm2-135m", "mini", "nf")
    assert e.value.differing == ("backend.name",)


def test_the_report_refuses_too_and_states_the_variant_it_used(tmp_path: Path, monkeypatch, capsys):
    two_backends(tmp_path)
    code, out, err = cli("report", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and _errors(err)[0].startswith("error: 2 variants of smollm2-135m × mini × nf")
    assert not (tmp_path / "report" / "index.html").exists()
    code, out, err = cli("report", "--results", str(tmp_path), "--prefer", "backend=llamacpp", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "Variants used: smollm2-135m × mini × nf: backend.name=llamacpp" in page


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


def test_reproduce_that_cannot_choose_a_variant_refuses_after_the_grids(tmp_path: Path, monkeypatch, capsys):
    """The grids ran (their cells are on disk); the tables could not choose: one note, the
    refusal and its candidates, exit 2, no traceback."""
    from madara_cli.commands import reproduce_verbs

    two_backends(tmp_path)

    def tables_only(backend, models, grids, results_dir, progress, overrides):
        return load_results(results_dir).find("smollm2-135m", "mini", "nf")

    monkeypatch.setattr(reproduce_verbs, "reproduce_all", tables_only)
    code, out, err = cli("reproduce", "--grids", "table1", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    lines = _errors(err)
    assert code == 2 and "Traceback" not in err
    assert lines[0].startswith("note: the grids ran; write the tables with madara tables") and lines[1].startswith("error: 2 variants")
    assert len(lines) == 4 and all(ln.startswith("  --prefer backend.name=") for ln in lines[2:])


def test_cells_of_one_variant_are_counted_as_one(tmp_path: Path):
    two_backends(tmp_path)
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [0], n=2, folder="nf__llamacpp_small", limit=2, settings={**SETTINGS, "limit": 2})
    with pytest.raises(AmbiguousVariant) as e:
        load_results(tmp_path).find("smollm2-135m", "mini", "nf")
    assert str(e.value).startswith("2 variants of smollm2-135m × mini × nf (3 cells) could fill a table cell")
    prefers = sorted(line.split()[1] for line in e.value.candidate_lines())
    assert prefers == ["backend.name=llamacpp", "backend.name=llamacpp", "backend.name=vllm"]
    chosen = load_results(tmp_path, prefer=(("backend.name", "llamacpp"),)).find("smollm2-135m", "mini", "nf")
    assert chosen.path.name == "nf__llamacpp"  # then the size rule: the full run
