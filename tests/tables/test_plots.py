"""`madara plot`: the figures of a results folder, their CIs and Pareto front, the
notes when a figure is skipped, and Figure 2 for every probed benchmark."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from madara_cli.core import stats
from madara_cli.results import record_files
from madara_cli.tables.figure import write_figure2
from madara_cli.tables.plots import model_tasks, pareto_front, write_plots
from tests.fakes import cli, one_line_error
from tests.results_fixtures import demo_like_results, write_cell, write_probe

pytest.importorskip("matplotlib")

@pytest.fixture
def results(tmp_path: Path) -> Path:
    return demo_like_results(tmp_path / "results")


def test_pareto_front_keeps_the_cheapest_way_to_each_em():
    # (calls, EM): (5, 30) costs more than (1, 30); (10, 50) is beaten by (10, 70); (30, 60) by (10, 70).
    points = [(1, 30), (10, 70), (30, 60), (10, 50), (5, 30), (40, 80)]
    assert pareto_front(points) == [0, 1, 5]
    assert pareto_front([]) == []


def test_intervals_follow_the_small_n_rule_of_madara_cli_stats(results: Path):
    task = next(t for t in model_tasks(results) if t.model == "llama-3.1-8b")
    nf, pde = task.points
    assert (nf.strategy, pde.strategy, pde.n) == ("nf", "pde", 10)
    a = np.array([1.0] * 9 + [0.0])
    b = np.array([1.0, 1.0] + [0.0] * 8)
    # Δ vs NF: Newcombe's paired score interval (what madara compare reports), on the shared queries.
    d, lo, hi = stats.paired_proportion_difference(a > 0.5, b > 0.5)
    assert (pde.paired.value, pde.paired.low, pde.paired.high) == pytest.approx((d, lo, hi)) and lo > 0  # a clear gain: starred
    # Each bar's own whisker: Wilson's interval of 9/10.
    assert (pde.ci.low, pde.ci.high) == pytest.approx(stats.proportion_interval(9, 10)) and 0.5 < pde.ci.low < 0.9 < pde.ci.high < 1
    assert nf.paired is None and nf.em == pytest.approx(0.2)
    assert pde.calls_per_query == 21 and nf.calls_per_query == 1
    mini = next(t for t in model_tasks(results) if t.model == "smollm2-135m")
    assert [p.strategy for p in mini.points] == ["nf", "three_agent", "sda", "atf", "pde", "pde_random", "rrf", "madara"]


def test_a_zero_of_five_cell_is_never_drawn_as_certain(tmp_path: Path):
    """The issue's check: 0/5 (and 5/5) cells get intervals of real width, in the bars,
    in Δ vs NF (where both are 0/5: no discordant pair at all) and in cost vs EM."""
    root = tmp_path / "results"
    write_cell(root, "demo", "smollm2-135m", "mini", "nf", [], n=5, calls=5)
    write_cell(root, "demo", "smollm2-135m", "mini", "pde", [], n=5, calls=105)
    write_cell(root, "demo", "smollm2-135m", "mini", "sda", [0, 1, 2, 3, 4], n=5, calls=155)
    (task,) = model_tasks(root)
    nf, pde, sda = sorted(task.points, key=lambda p: p.strategy)
    assert (nf.ci.low, nf.ci.high) == pytest.approx((0.0, 0.4345), abs=1e-4)  # Wilson: [0, 43%]
    assert sda.ci.low == pytest.approx(1 - 0.4345, abs=1e-4) and sda.ci.high == 1.0
    assert pde.paired.value == 0 and pde.paired.low < -0.3 and pde.paired.high > 0.3 and not pde.paired.excludes_zero()
    figs = write_plots(root, tmp_path / "out", formats=["png", "pdf"])
    assert {p.name for p in figs.paths} >= {"em_by_strategy.png", "cost_vs_em.pdf"}


def test_figures_are_ready_for_a_paper(results: Path, tmp_path: Path):
    """TrueType (Type 42) fonts in the PDFs, 300 dpi PNGs, and every cost-vs-EM point named."""
    import matplotlib.image

    from madara_cli.tables.plots import draw_cost_vs_em

    figs = write_plots(results, tmp_path / "f", formats=["png", "pdf"])
    pdf = (tmp_path / "f" / "cost_vs_em.pdf").read_bytes()
    # Type 42 is embedded as TrueType (CIDFontType2 under a Type0 font when glyphs beyond Latin-1 are used).
    assert b"/Subtype /Type3" not in pdf and (b"/CIDFontType2" in pdf or b"/Subtype /TrueType" in pdf)
    png = tmp_path / "f" / "cost_vs_em.png"
    from PIL import Image

    assert Image.open(png).info["dpi"] == pytest.approx((300, 300), abs=1)
    assert matplotlib.image.imread(png).shape[1] > 1500 and figs.paths
    tasks = [t for t in model_tasks(results) if t.model == "smollm2-135m"]
    fig = draw_cost_vs_em(tasks)
    texts = " | ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    for name in ("NF", "3-Agent", "SDA", "ATF", "PDE", "MADARA"):
        assert name in texts, (name, texts)


def test_madara_plot_writes_png_and_pdf(results: Path, tmp_path: Path, monkeypatch, capsys):
    out = tmp_path / "figs"
    code, stdout, stderr = cli("plot", "--results", str(results), "--out", str(out), "--format", "png,pdf", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, stderr
    import matplotlib.image

    for stem in ("em_by_strategy", "cost_vs_em", "routing_map", "rsc_trend", "figure2", "figure2-mini"):
        png, pdf = out / f"{stem}.png", out / f"{stem}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", stem
        assert pdf.read_bytes()[:5] == b"%PDF-", stem
        assert str(png) in stdout
        pixels = matplotlib.image.imread(png)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 300 and float(pixels[..., :3].std()) > 0.05, stem  # drawn, not blank
    assert "note:" not in stderr  # every figure had what it needs


def test_plot_formats_and_bad_input(results: Path, tmp_path: Path, monkeypatch, capsys):
    figs = write_plots(results, tmp_path / "svg", formats=["svg"])
    assert {p.suffix for p in figs.paths} == {".svg"} and all(p.read_text().lstrip().startswith("<?xml") for p in figs.paths)
    code, _, err = cli("plot", "--results", str(results), "--format", "png,gif", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "gif", "png, pdf, svg")
    code, _, err = cli("plot", "--results", str(results), "--metric", "bleu", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "bleu", "em_strict")


def test_skipped_figures_say_why(tmp_path: Path, monkeypatch, capsys):
    root = tmp_path / "results"
    write_cell(root, "adhoc", "smollm2-135m", "mini", "nf", [0], accounting={})
    figs = write_plots(root, tmp_path / "out")
    # The routing map is always drawn: the paper's ten pairs, and a note that none of ours is on it.
    assert [p.name for p in figs.paths] == ["em_by_strategy.png", "em_by_strategy.pdf", "routing_map.png", "routing_map.pdf"]
    assert any(n.startswith("cost-vs-EM figure skipped: no cell records its LLM calls") for n in figs.notes)
    assert any(n.startswith("ρ̂1..3 figure skipped: no RSC probe") for n in figs.notes)
    assert any(n.startswith("routing map: the paper's pairs only; no RSC probe") for n in figs.notes)
    assert any(n.startswith("Figure 2 skipped: no RSC probe") for n in figs.notes)
    # A degenerate probe (no parsable scores, as SmolLM2's can be): routed, but no ρ̂ to draw.
    write_probe(root, "smollm2-135m", "mini", None, "degenerate", "pde", em_nf=0.0, per_query=None)
    figs = write_plots(root, tmp_path / "out2", formats=["png"])
    assert "routing_map.png" in [p.name for p in figs.paths]
    assert "ρ̂1..3 figure skipped: no probe records all three ρ̂" in figs.notes
    assert "Figure 2 for mini skipped: its probes record no per-query ρ at all three levels" in figs.notes
    (tmp_path / "empty").mkdir()
    code, _, err = cli("plot", "--results", str(tmp_path / "empty"), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "note: EM-by-strategy and cost-vs-EM figures skipped: no finished cell" in err
    code, _, err = cli("plot", "--results", str(tmp_path / "absent"), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "no results folder at")


def test_tables_draw_figure2_for_every_probed_benchmark(tmp_path: Path, monkeypatch, capsys):
    root = tmp_path / "results"
    write_probe(root, "mistral-7b", "fever", [0.6, 0.3, 0.0], "quality-ordered", "cot")
    code, stdout, stderr = cli("tables", "--results", str(root), "--format", "md", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, stderr
    assert (root / "figures" / "figure2-fever.png").is_file() and not (root / "figures" / "figure2.png").exists()
    assert "figure2-fever.png" in stdout and "note:" not in stderr
    # A probe whose record has no per-query values: the figure is skipped, and the user is told.
    write_probe(root, "llama-3.1-8b", "conflicts", per_query={"mean": [0.5, 0.2, 0.0], "std": [0.1, 0.1, 0.1]})
    code, _, stderr = cli("tables", "--results", str(root), "--format", "md", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "note: Figure 2 for conflicts skipped: its probes record no per-query ρ at all three levels" in stderr
    empty = tmp_path / "no-probes"
    write_cell(empty, "adhoc", "smollm2-135m", "mini", "nf", [0])
    code, _, stderr = cli("tables", "--results", str(empty), "--format", "md", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "note:" not in stderr  # no probe, nothing to say about Figure 2


def test_a_benchmark_name_from_results_never_becomes_a_path(tmp_path: Path):
    root = tmp_path / "results"
    folder = write_probe(root, "mistral-7b", "fever")
    record_files.write_probe(folder, dataclasses.replace(record_files.read_probe(folder), benchmark="../../escaped"))
    figs = write_figure2(root, tmp_path / "out")
    assert [p.parent for p in figs.paths] == [tmp_path / "out"]
    assert figs.paths[0].name == "figure2-_.._escaped.png" and not list(tmp_path.glob("escaped*"))


def test_plot_without_matplotlib_fails_in_one_line(results: Path, monkeypatch, capsys):
    from madara_cli.tables import figure

    monkeypatch.setattr(figure, "pyplot", lambda: None)
    code, _, err = cli("plot", "--results", str(results), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "matplotlib", "madara[plots]")


def test_compare_takes_cell_keys_and_results_and_prints_small_n_intervals(tmp_path: Path, monkeypatch, capsys):
    """`madara compare KEY_A KEY_B --results DIR` (as every verb takes --results); at n = 5
    it still gives Wilson and Newcombe intervals, never a certain 0."""
    root = tmp_path / "results"
    a = write_cell(root, "demo", "smollm2-135m", "mini", "nf", [], n=5, calls=5)
    b = write_cell(root, "demo", "smollm2-135m", "mini", "pde", [], n=5, calls=105)
    code, out, err = cli("compare", a.name, b.name, "--results", str(root), "--json", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    import json

    r = json.loads(out)
    assert r["n"] == 5 and r["em_a_ci"][0] == 0 and r["em_a_ci"][1] > 0.4
    assert r["diff_ci_low"] < -0.3 and r["diff_ci_high"] > 0.3 and r["ci_low"] is None  # no bootstrap below 10 pairs
    code, out, err = cli("compare", a.name, b.name, "--results", str(root), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "EM  A 0.0% [0.0, 43.4]" in out and "newcombe" in out
    code, _, err = cli("compare", "no-such-key", b.name, "--results", str(root), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "no-such-key")


def test_show_and_the_run_table_give_a_zero_of_five_cell_its_interval(tmp_path: Path, monkeypatch, capsys):
    root = tmp_path / "results"
    a = write_cell(root, "demo", "smollm2-135m", "mini", "nf", [], n=5, calls=5)
    code, out, err = cli("show", a.name, "--results", str(root), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "EM %        0.0 [0.0, 43.4]  (Wilson 95%)" in out  # the summary's first lines
    code, out, err = cli("show", a.name, "--results", str(root), "--all", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "em % [95% Wilson]" in out  # and every rate with its interval in the full record
    from types import SimpleNamespace

    from madara_cli.commands.run_verbs import results_table
    from madara_cli.results.record_files import read_cell

    record = read_cell(a)
    row = SimpleNamespace(record=record, cell=record.cell, skipped=True)
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(results_table([row], "cell"))
    assert "0.0 [0, 43]" in console.export_text()


def _zero_em_cells(root: Path) -> Path:
    """SmolLM2 as the demo leaves it: EM 0 in every cell, F1 and contains above 0."""
    rows = [{"em": 0, "f1": f1, "contains": c} for f1, c in ((0.5, 1), (0.0, 0), (0.25, 1), (0.0, 0), (0.4, 1))]
    write_cell(root, "demo", "smollm2-135m", "mini", "nf", predictions=rows, calls=5)
    write_cell(root, "demo", "smollm2-135m", "mini", "pde", predictions=[{**r, "f1": r["f1"] / 2} for r in rows], calls=105)
    return root


def test_an_em_of_zero_everywhere_draws_f1_and_says_so(tmp_path: Path):
    from madara_cli.tables.plots import build_figures, shown_metric

    root = _zero_em_cells(tmp_path / "results")
    assert shown_metric(root, "em") == ("f1", "EM is 0 in every cell, so these figures show F1 (madara plot --metric em draws EM anyway)")
    figures, _ = build_figures(root)
    by_stem = {f.stem: f for f in figures}
    bars = by_stem["em_by_strategy"]
    assert (bars.metric, bars.title) == ("f1", "F1 by strategy") and bars.caption.startswith("EM is 0 in every cell, so these figures show F1")
    assert by_stem["cost_vs_em"].title == "Cost vs F1" and by_stem["cost_vs_em"].metric == "f1"
    # The bars are F1's (23% and 11.5%), not empty frames at 0.
    heights = sorted(round(p.get_height(), 1) for p in bars.fig.axes[0].patches)
    assert heights == [11.5, 23.0]
    # An asked-for metric is kept; an informative EM is kept; contains stands in when F1 is 0 too.
    assert shown_metric(root, "f1") == ("f1", "") and shown_metric(root, "contains") == ("contains", "")
    write_cell(tmp_path / "some", "demo", "smollm2-135m", "mini", "nf", [0], n=5)
    assert shown_metric(tmp_path / "some", "em") == ("em", "")
    write_cell(tmp_path / "flat", "demo", "smollm2-135m", "mini", "nf", predictions=[{"em": 0, "f1": 0.0, "contains": 1}, {"em": 0, "f1": 0.0}])
    assert shown_metric(tmp_path / "flat", "em")[0] == "contains"


def _inside(fig, ax, artists) -> list[str]:
    """The texts among ``artists`` whose drawn box leaves ``ax``'s frame."""
    fig.canvas.draw()
    frame = ax.get_window_extent()
    bad = []
    for a in artists:
        box = a.get_window_extent()
        if box.x0 < frame.x0 - 1 or box.x1 > frame.x1 + 1 or box.y0 < frame.y0 - 1 or box.y1 > frame.y1 + 1:
            bad.append(a.get_text())
    return bad


def test_points_and_their_names_stay_inside_the_axes(tmp_path: Path):
    """Our degenerate pair (NF 0, no ρ̂1) sat under the axis labels; a pair at NF 100
    would hang its name off the right edge."""
    from madara_cli.tables.plots import NO_RHO, draw_cost_vs_em, draw_routing_map

    root = tmp_path / "results"
    write_probe(root, "smollm2-135m", "mini", None, "degenerate", "pde", em_nf=0.0, per_query=None)
    write_probe(root, "qwen3-8b", "mini", [0.95, 0.5, 0.1], "quality-ordered", "atf", em_nf=1.0)
    from madara_cli.results.stored import load_results

    results = load_results(root)
    fig = draw_routing_map([results.probe(m, "mini") for m in ("smollm2-135m", "qwen3-8b")])
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    points = np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
    assert len(points) == 10 + 2  # the paper's ten pairs and our two
    assert all(x0 < x < x1 and y0 < y < y1 for x, y in points), points
    assert [0.0, NO_RHO] in points.tolist()  # the degenerate pair, on the strip inside the frame
    names = [t for t in ax.texts if t.get_text().startswith(("SmolLM2", "Qwen3"))]
    assert len(names) == 2 and _inside(fig, ax, names) == []
    root2 = tmp_path / "cost"
    write_cell(root2, "demo", "smollm2-135m", "mini", "nf", [], n=5, calls=5)
    write_cell(root2, "demo", "smollm2-135m", "mini", "self_consistency", [0, 1, 2, 3, 4], n=5, calls=5 * 40)
    write_cell(root2, "demo", "smollm2-135m", "mini", "pde_random", [0, 1, 2, 3, 4], n=5, calls=5 * 38)
    fig = draw_cost_vs_em(model_tasks(root2))
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_text()]
    assert {t.get_text() for t in labels} == {"NF", "PDE-Random", "Self-Consistency"} and _inside(fig, ax, labels) == []


def test_one_colour_per_strategy_in_every_figure(results: Path):
    """The palette is defined once (madara_cli.tables.palette): a strategy's bars, its
    cost point and its route on the map share its one colour, and no two strategies
    (nor Figure 2's class colours) share one."""
    from matplotlib.colors import to_hex

    from madara_cli import paper as pv
    from madara_cli.tables.figure import Figure
    from madara_cli.tables.palette import NOT_QUALITY_ORDERED, QUALITY_ORDERED, STRATEGY_COLOURS, strategy_colour
    from madara_cli.tables.plots import build_figures

    assert set(STRATEGY_COLOURS) == set(pv.STRATEGY_LABELS)
    assert len({*STRATEGY_COLOURS.values(), QUALITY_ORDERED, NOT_QUALITY_ORDERED}) == len(STRATEGY_COLOURS) + 2
    figures, _ = build_figures(results)
    by_stem: dict[str, Figure] = {f.stem: f for f in figures}
    mini = next(t for t in model_tasks(results) if t.model == "smollm2-135m")
    bars = [ax for ax in by_stem["em_by_strategy"].fig.axes if ax.get_title() == "SmolLM2-135M · Mini"][0]
    assert [to_hex(p.get_facecolor()) for p in bars.patches] == [strategy_colour(p.strategy).lower() for p in mini.points]
    cost = [ax for ax in by_stem["cost_vs_em"].fig.axes if ax.get_title().startswith("SmolLM2-135M · Mini")][0]
    drawn = {to_hex(c.get_facecolor()[0]) for c in cost.collections if len(c.get_offsets()) == 1 and c.get_facecolor().size}
    assert {strategy_colour(p.strategy).lower() for p in mini.points} <= drawn
    routes = {to_hex(c.get_edgecolor()[0]) for c in by_stem["routing_map"].fig.axes[0].collections if len(c.get_offsets())}
    assert {strategy_colour(r).lower() for r in ("pde", "sda", "atf", "cot")} <= routes
    assert by_stem["routing_map"].strategies[:4] == ("pde", "atf", "cot", "sda")  # the paper's routes, in Table 2's order


def test_figures_mark_a_degraded_cell_and_name_the_settings_their_bars_differ_in(tmp_path: Path):
    """A degraded cell's bar is hatched and its value marked ◊, with a legend entry (and a
    ringed point in cost vs EM); bars resting on different settings (NF at k=5, 3-Agent at
    k=10 on two queries) say so in the panel's title and the caption."""
    from madara_cli.results.health import MARK
    from madara_cli.tables.plots import DEGRADED_LABEL, build_figures
    from tests.results.test_health import SMOLLM_ACCOUNTING, SMOLLM_ASSESSMENT

    root = tmp_path / "results"
    settings = {"model.name": "smollm2-135m", "backend.name": "llamacpp", "benchmark.name": "mini", "retriever.k": 5, "limit": 5}
    write_cell(root, "demo", "smollm2-135m", "mini", "nf", [0, 1], n=5, limit=5, k=5, settings={**settings, "strategy.name": "nf"})
    write_cell(root, "adhoc", "smollm2-135m", "mini", "three_agent", [0], n=2, limit=2, assessment=SMOLLM_ASSESSMENT, accounting=SMOLLM_ACCOUNTING,
               settings={**settings, "strategy.name": "three_agent", "retriever.k": 10, "limit": 2})
    (task,) = model_tasks(root)
    assert [p.degraded for p in task.points] == [False, True]
    assert task.differ == "retriever.k 5 (NF), 10 (3-Agent); limit 5 (NF), 2 (3-Agent)"
    figures, _ = build_figures(root)
    by_stem = {f.stem: f for f in figures}
    em = by_stem["em_by_strategy"]
    ax = em.fig.axes[0]
    assert "bars differ in retriever.k 5 (NF), 10 (3-Agent)" in ax.get_title().replace("\n", " ")
    assert "its bars differ in retriever.k 5 (NF), 10 (3-Agent); limit 5 (NF), 2 (3-Agent)" in em.caption
    bars = [b for b in ax.patches if b.get_height() > 0]
    assert [b.get_hatch() or "" for b in bars] == ["", "////"]
    assert [t.get_text() for t in ax.texts][:2] == ["40.0", f"50.0{MARK}"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [DEGRADED_LABEL]
    cost = by_stem["cost_vs_em"]
    assert DEGRADED_LABEL in [t.get_text() for t in cost.fig.legends[0].get_texts()] and "bars differ in" in cost.caption


@pytest.mark.parametrize("model", ["smollm2-135m", "llama-3.1-8b"])
def test_the_cost_figures_key_fits_inside_the_figure(results: Path, model: str):
    """Every strategy and the degraded mark's long name: the key wraps to rows instead of
    running off both sides of the figure (the demo's report showed it cut at either end)."""
    from madara_cli.tables.plots import DEGRADED_LABEL, draw_cost_vs_em

    (task,) = [t for t in model_tasks(results) if t.model == model]
    task = dataclasses.replace(task, points=[dataclasses.replace(p, degraded=True) if p.strategy != "nf" else p for p in task.points])
    fig = draw_cost_vs_em([task])
    fig.canvas.draw()
    (key,) = fig.legends
    box = key.get_window_extent(fig.canvas.get_renderer())
    assert DEGRADED_LABEL in [t.get_text() for t in key.get_texts()]
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0, (box, fig.bbox)
