"""The story a results folder tells: the Diagnose → Treat cards at the top of the
report page, the routing map with the paper's ten pairs beside ours, the folded tables,
and the lines `madara report` (and so `make demo`) ends with."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from madara_cli import paper as pv
from madara_cli.tables.builders import TABLES
from madara_cli.tables.lookup import load_results
from madara_cli.tables.report import esc, holds_ours, write_report
from madara_cli.tables.story import cards, story_lines
from tests.conftest import ROOT
from tests.fakes import FakeBackend, cli
from tests.results_fixtures import demo_like_results, write_cell, write_probe

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = demo_like_results(tmp_path_factory.mktemp("story") / "results")
    return write_report(root).path


def test_cards_pair_the_routed_cell_with_nf_and_mcnemar(page: Path):
    found = {(c.model, c.benchmark): c for c in cards(load_results(page.parent.parent))}
    smol = found[("smollm2-135m", "mini")]
    # demo_like_results: NF right on queries 0, 1, 7; madara (routed PDE) on 0-6 of 10.
    assert (smol.route, smol.routed_source, smol.nf_em, smol.routed_em) == ("pde", "madara cell", 30.0, 70.0)
    assert (smol.paired.n, smol.paired.b, smol.paired.c) == (10, 5, 1)
    assert smol.paired.p == pytest.approx(0.21875)  # exact binomial: 2 * P(X <= 1 | 6, 1/2) = 14/64
    llama = found[("llama-3.1-8b", "conflicts")]
    assert (llama.routed_source, llama.routed_em, llama.paired.b, llama.paired.c) == ("pde cell (routed)", 90.0, 7, 0)


def test_the_page_opens_with_the_cards(page: Path):
    text = page.read_text(encoding="utf-8")
    assert text.index('id="story"') < text.index('id="figures"') < text.index('id="tables"')
    story = text.split('id="story"')[1].split('id="figures"')[0]
    assert story.count('<article class="card">') == 2
    card = story.split("SmolLM2-135M × Mini")[1].split("</article>")[0]
    assert "No-Filter EM 30.0% on 10 queries" in card
    assert "<strong>Stochastic</strong>" in card and "ρ̂ +0.31/+0.12/-0.05" in card
    assert f"<strong>PDE</strong>: {esc('NF 30.0% ≥ τ_NF; stochastic → PDE')}" in card
    assert "<strong>PDE EM 70.0%</strong> vs NF 30.0% (+40.0 pp) on 10 queries" in card
    assert "McNemar exact p = 0.22 on 10 shared queries" in card
    assert "<script" not in text


def test_the_routing_map_has_the_papers_ten_pairs_beside_ours(page: Path):
    """One routing map on the page, the matplotlib figure: the paper's ten pairs (hollow,
    numbered, keyed beside the axes) and ours (filled, named), coloured by the route."""
    from matplotlib.colors import to_hex

    from madara_cli.tables.palette import strategy_colour
    from madara_cli.tables.plots import build_figures

    text = page.read_text(encoding="utf-8")
    assert text.count('data-stem="routing_map"') == 1 and "<svg" not in text  # no hand-drawn second map, no table of it
    figures, _ = build_figures(page.parent.parent)
    fig = next(f for f in figures if f.stem == "routing_map").fig
    ax = fig.axes[0]
    points = [(tuple(c.get_offsets()[0]), to_hex(c.get_edgecolor()[0]), to_hex(c.get_facecolor()[0])) for c in ax.collections
              if len(c.get_offsets()) == 1]
    hollow = [(xy, edge) for xy, edge, face in points if face == "#ffffff"]
    filled = [(xy, face) for xy, edge, face in points if face != "#ffffff"]
    assert len(hollow) == len(pv.ROUTING_PAIRS) == 10 and len(filled) == 2
    # Table 2's values: Mistral-7B CONFLICTS sits at NF 18.1, ρ̂1 0.35 and routes to PDE.
    assert ((18.1, 0.35), strategy_colour("pde").lower()) in [((round(x, 2), round(y, 2)), c) for (x, y), c in hollow]
    assert ((30.0, 0.31), strategy_colour("pde").lower()) in [((round(x, 2), round(y, 2)), c) for (x, y), c in filled]
    key = " ".join(t.get_text() for t in fig.texts)
    assert " 3  Mistral-7B-v0.3 · Conflicts → PDE" in key and "10  Gemma-2-9B · FEVER → ATF" in key
    assert {t.get_text() for t in ax.texts} >= {"SmolLM2-135M · Mini", "Llama-3.1-8B · Conflicts", *map(str, range(1, 11))}


def test_tables_without_a_value_of_ours_are_folded(page: Path):
    from madara_cli.tables.builders import build_table

    text = page.read_text(encoding="utf-8")
    root = page.parent.parent
    fold = text.split('<details class="fold">')[1].split("</section>")[0]  # one compact list of them all
    folded = set(re.findall(r'<li><details><summary>[^<]*(?:<code>[^<]*</code>[^<]*)*</summary><div class="table" id="([^"]+)"', fold))
    assert fold.count("<li><details>") == len(folded) and f"{len(folded)} more paper table(s) with no cell of ours yet" in fold
    ours = {name for name in TABLES if holds_ours(build_table(name, root))}
    assert folded == set(TABLES) - ours
    assert "table1" in ours and folded  # Llama NF on CONFLICTS is ours; most tables here are the paper's alone
    for name in ours:
        assert f'<div class="table" id="{name}"' in text.split('id="tables"')[1]


def test_holds_ours_reads_the_ours_side_of_a_cell():
    assert not holds_ours(pd.DataFrame({"Model": ["Llama-3.1-8B"], "NF": ["— / 13.9"], "n": ["— / 7/10"], "c": ["— / Stochastic"]}))
    assert holds_ours(pd.DataFrame({"Model": ["Llama-3.1-8B"], "NF": ["20.0 / 13.9 (+6.1)"]}))
    assert holds_ours(pd.DataFrame({"Model": ["SmolLM2-135M"], "class": ["Stochastic / n/a"]}))


def test_story_lines_say_what_ran_and_what_to_type_next(page: Path):
    lines = story_lines(load_results(page.parent.parent), "results/report/index.html", "madara run --grid demo-full")
    assert [ln.split()[0] for ln in lines] == ["Diagnose", "Treat", "Diagnose", "Treat", "Look", "Next"]
    smol = lines[2:4]
    assert "SmolLM2-135M × Mini: NF EM 30.0%" in smol[0] and "→ route PDE: NF 30.0% ≥ τ_NF; stochastic → PDE" in smol[0]
    assert "routed PDE EM 70.0% vs NF 30.0% (+40.0 pp) on 10 queries; McNemar exact p = 0.22" in smol[1]
    # Llama's NF (20%) is under the capability floor: F1 and contains stand beside EM, as in the tables.
    assert lines[1].endswith("; F1 90.0% vs 20.0%, contains 90.0% vs 20.0% (EM under the 30% floor says little)")
    assert "F1" not in smol[1]
    assert lines[4].startswith("Look      open results/report/index.html")
    assert "madara show " in lines[5] and lines[5].endswith("madara run --grid demo-full")
    assert story_lines(load_results(page.parent.parent), "p", most=1)[2].strip().startswith("… and 1 more")


def test_a_folder_without_a_probe_says_how_to_get_one(tmp_path: Path):
    write_cell(tmp_path, "adhoc", "smollm2-135m", "mini", "nf", [0], n=4)
    lines = story_lines(load_results(tmp_path), "p")
    assert lines[0].startswith("Diagnose  no RSC probe") and lines[-1] == "Next      madara ls grids (what else can run)"


def test_a_probe_whose_route_has_not_run_says_so(tmp_path: Path):
    write_probe(tmp_path, "mistral-7b", "mini", route="sda", reason="stochastic → SDA")
    (card,) = cards(load_results(tmp_path))
    assert card.routed is None and card.nf_em == 30.0  # the probe's calibration NF stands in
    line = story_lines(load_results(tmp_path), "p")[1]
    assert "the routed SDA has not run (madara run model=mistral-7b benchmark=mini strategy=madara)" in line


def test_a_degenerate_probe_card_says_there_is_no_rho(tmp_path: Path):
    write_cell(tmp_path, "demo", "smollm2-135m", "mini", "nf", [], n=5)
    write_probe(tmp_path, "smollm2-135m", "mini", None, "degenerate", "pde", n=2, em_nf=0.0,
                degenerate={"is_degenerate": True, "floor_share": 1.0, "ceiling_share": 0.0, "mean_score": 0.0},
                reason="NF EM 0% < τ_NF 30% → per-document isolation (PDE)")
    text = write_report(tmp_path).path.read_text(encoding="utf-8")
    card = text.split('<article class="card">')[1].split("</article>")[0]
    assert "<strong>Degenerate</strong>: no ρ̂ (degenerate scores)" in card and "shuffled" not in card
    assert "the routed PDE has not run" in card


def test_make_demo_ends_with_the_report_and_the_larger_grid():
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\ndemo:")[1].split("\n\n")[0].strip().splitlines()
    assert "madara run --grid demo" in recipe[1]
    assert "madara report --next" in recipe[-1] and "demo-full" in recipe[-1]
    from madara_cli.config import load_grid

    small, full = load_grid("demo"), load_grid("demo-full")
    assert {"nf", "madara"} <= set(small.axes["strategy"]) < set(full.axes["strategy"])


def test_the_demo_grid_ends_with_five_lines_on_the_fake_engine(tmp_path: Path, monkeypatch, capsys):
    """The demo's cells through the real runner on the fake engine, then `madara report`
    as `make demo` calls it: the page is written and five lines follow."""
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.runner import run_cell

    fake = FakeBackend()
    pool = EnginePool(factory=lambda cfg: fake)
    for cfg in expand("demo", [f"results_dir={tmp_path}"]):
        run_cell(cfg, pool)
    code, stdout, stderr = cli("report", "--results", str(tmp_path), "--next", "madara run --grid demo-full", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, stderr
    page = tmp_path / "report" / "index.html"
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines[-5].startswith(f"wrote {page} ")
    assert [ln.split()[0] for ln in lines[-4:]] == ["Diagnose", "Treat", "Look", "Next"]
    assert "SmolLM2-135M × Mini" in lines[-4] and "→ route " in lines[-4]
    assert re.search(r"routed \S+ EM \d+\.\d% vs NF \d+\.\d%", lines[-3]) and "McNemar exact p" in lines[-3]
    assert lines[-1].endswith("madara run --grid demo-full") and "madara show smollm2-135m__mini__madara" in lines[-1]
    assert f" --results {tmp_path} (the routed cell" in lines[-1]
    assert page.is_file() and '<article class="card">' in page.read_text(encoding="utf-8")
