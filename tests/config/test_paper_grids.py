"""One list of paper grids, derived from each grid's ``produces:``; `madara reproduce`,
`madara ls grids --paper` and `make reproduce` all take it from there."""

from __future__ import annotations

from madara_cli.config import load_grid, options, paper_grids
from madara_cli.tables import TABLES
from tests.fakes import cli


def test_paper_grids_are_the_grids_that_produce_tables_probes_first():
    grids = paper_grids()
    assert set(grids) == {g for g in options("grid") if load_grid(g).produces}
    assert grids == ["probes", "table1", "table2", "table6", "table7", "table15", "table16", "table18", "floor"]
    assert "demo" not in grids and "demo-cot" not in grids  # smoke grids fill the demo tables, not the paper's


def test_every_table_is_produced_by_a_paper_grid():
    produced = {t for g in paper_grids() for t in load_grid(g).produces}
    assert produced == set(TABLES)


def test_ls_paper_grids_and_the_makefile_names_none():
    r = cli("ls", "grids", "--paper")
    assert r.returncode == 0 and r.stdout.split() == paper_grids()
    bad = cli("ls", "models", "--paper")
    assert bad.returncode != 0 and "madara ls grids --paper" in bad.stderr
    from tests.conftest import ROOT

    make = (ROOT / "Makefile").read_text()
    assert not any(f" {g} " in make or f" {g}\n" in make for g in ("table1", "table15", "floor"))
