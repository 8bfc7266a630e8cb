"""The probes' figures: Figure 2 (per-query ρ violins per model and level from ``per_query.values``,
F.2; green for quality-ordered, rose otherwise) for every probed benchmark, and ``rsc_trend``.
Also what every figure shares: :class:`Figure`, the matplotlib loader, text sizes, panel grids,
label placement and the PNG/PDF/SVG writer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from madara_cli import paper as pv
from madara_cli.tables.lookup import Results, _results
from madara_cli.tables.palette import NOT_QUALITY_ORDERED, QUALITY_ORDERED, model_shade

LEVELS = ("Shuffled", "Contra.", "Random")
FIGURE_FORMATS = ("png", "pdf", "svg")
NO_MATPLOTLIB = "it needs matplotlib (pip install 'madara[plots]')"


@dataclass(frozen=True)
class Figure:
    """One drawn figure: file stem, short title, the caption saying how to read it, the strategies it colours."""

    stem: str
    title: str
    caption: str
    fig: Any
    strategies: tuple[str, ...] = ()
    metric: str = ""
    key: tuple[str, ...] = ()  # the legend as lines of text, when the page prints it (readable at any width) instead of the image


@dataclass(frozen=True)
class FigureSet:
    """What a figure writer produced: the files, and one line per figure it skipped and why."""

    paths: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    """The requested figure formats, or ValueError naming the valid ones."""
    formats = tuple(dict.fromkeys(f.strip().lower() for f in formats if f.strip()))
    bad = [f for f in formats if f not in FIGURE_FORMATS]
    if bad or not formats:
        raise ValueError(f"unknown figure format(s) {', '.join(bad) or '(none)'}; valid: {', '.join(FIGURE_FORMATS)}")
    return formats


# TrueType (Type 42) fonts in PDF/PS, which journals accept and stay editable (not Type 3); PNGs at print resolution.
PAPER_RC = {"pdf.fonttype": 42, "ps.fonttype": 42}
PNG_DPI = 300


def pyplot():
    """matplotlib.pyplot on the Agg backend with :data:`PAPER_RC`, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # matplotlib is the plots extra
        return None
    matplotlib.rcParams.update(PAPER_RC)
    return plt


# Dates in PDF/SVG metadata would make two drawings of the same results differ byte for byte.
_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}


def save_figure(fig: Any, out_dir: Path, stem: str, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write ``fig`` as ``out_dir/<stem>.<fmt>`` for each format (atomically) and close it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    try:
        for fmt in formats:
            path = out / f"{stem}.{fmt}"
            tmp = out / f".{stem}.{fmt}.tmp"
            fig.savefig(tmp, format=fmt, dpi=PNG_DPI, metadata=_METADATA.get(fmt, {}))
            tmp.replace(path)
            paths.append(path)
    finally:
        pyplot().close(fig)
    return paths


def suptitle(fig: Any, text: str, fontsize: float = 9) -> None:
    """A figure title wrapped to the figure's width, so a one-panel figure does not cut it off."""
    import textwrap

    chars = max(30, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))  # an average glyph is about 0.55 em wide
    fig.suptitle("\n".join(textwrap.fill(line, chars) for line in text.split("\n")), fontsize=fontsize)


def safe_stem(name: str) -> str:
    """A file-name part from a name found in results (a benchmark): never a path or a dot file."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).lstrip(".") or "_"


def figure2_stem(benchmark: str) -> str:
    """``figure2`` for CONFLICTS (the paper's figure), ``figure2-<benchmark>`` for the others."""
    return "figure2" if benchmark == "conflicts" else f"figure2-{safe_stem(benchmark)}"


def probed_benchmarks(results: Results) -> list[str]:
    order = {b: i for i, b in enumerate(pv.BENCHMARK_LABELS)}
    return sorted({p.benchmark for p in results.probes if p.benchmark}, key=lambda b: (order.get(b, len(order)), b))


def figure2_panels(results: Results, benchmark: str) -> list[tuple[Any, list[np.ndarray]]]:
    """(probe, three arrays of finite per-query ρ) per model probed on ``benchmark`` with values at all three levels."""
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    models = sorted({p.model for p in results.probes if p.benchmark == benchmark}, key=lambda m: (order.get(m, len(order)), m))
    panels = []
    for probe in (results.probe(m, benchmark) for m in models):
        values = probe.per_query_values()
        levels = [
            np.asarray([v for v in level if isinstance(v, (int, float))] if isinstance(level, (list, tuple)) else [], dtype=float)
            for level in values[:3]
        ]
        levels = [lvl[np.isfinite(lvl)] for lvl in levels]
        if len(levels) == 3 and all(lvl.size for lvl in levels):
            panels.append((probe, levels))
    return panels


def draw_figure2(panels: list[tuple[Any, list[np.ndarray]]], benchmark: str):
    """The Figure 2 violins for one benchmark as a matplotlib figure (matplotlib must be importable)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(max(3.4 * len(panels), 6.0), 4.2), sharey=True, squeeze=False)
    for ax, (probe, levels) in zip(axes[0], panels, strict=True):
        colour = QUALITY_ORDERED if probe.rsc_class == "quality-ordered" else NOT_QUALITY_ORDERED
        parts = ax.violinplot(levels, showmedians=True, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(colour)
            body.set_alpha(0.35)
        parts["cmedians"].set_color(colour)
        for i, level in enumerate(levels, start=1):
            ax.text(i, -1.22, f"{level.mean():+.2f}", ha="center", va="top", fontsize=8)
        ax.set_xticks([1, 2, 3], LEVELS, fontsize=8)
        ax.set_ylim(-1.35, 1.05)
        ax.axhline(0, color="grey", lw=0.5, ls=":")
        n = min(lvl.size for lvl in levels)
        ax.set_title(
            f"{pv.MODEL_LABELS.get(probe.model, probe.model)}\n{pv.CLASS_LABELS.get(probe.rsc_class, '?')} (n={n})", fontsize=9
        )
        for spine in ax.spines.values():
            spine.set_edgecolor(colour)
    axes[0][0].set_ylabel("per-query Spearman ρ")
    suptitle(fig, f"Figure 2: per-query ρ on {pv.BENCHMARK_LABELS.get(benchmark, benchmark)}", fontsize=11)
    fig.tight_layout()
    return fig


FIGURE2_CAPTION = ("Per-query Spearman ρ between the re-scored chain's quality and its score, one violin per perturbation level "
                   "(line: median; number: mean), a panel per model. Green: a quality-ordered probe (ρ* = −1); rose: otherwise.")


def figure2_figures(source: Path | str | Results) -> tuple[list[Figure], list[str]]:
    """Figure 2 for every probed benchmark: ([:class:`Figure`], notes on the ones skipped)."""
    results = _results(source)
    benchmarks = probed_benchmarks(results)
    if not benchmarks:
        return [], [f"Figure 2 skipped: no RSC probe in {results.root} (madara probe model=M benchmark=B writes one)"]
    if pyplot() is None:
        return [], [f"Figure 2 skipped: {NO_MATPLOTLIB}"]
    figures, notes = [], []
    for benchmark in benchmarks:
        panels = figure2_panels(results, benchmark)
        if not panels:
            notes.append(f"Figure 2 for {benchmark} skipped: its probes record no per-query ρ at all three levels")
            continue
        label = pv.BENCHMARK_LABELS.get(benchmark, benchmark)
        figures.append(Figure(figure2_stem(benchmark), f"Figure 2: per-query ρ on {label}", FIGURE2_CAPTION, draw_figure2(panels, benchmark)))
    return figures, notes


def write_figure2(results_dir: Path | str, out_dir: Path | None = None, formats: Sequence[str] = ("png",),
                  note_no_probe: bool = True) -> FigureSet:
    """Figure 2 for every probed benchmark into ``out_dir`` (default ``results_dir/figures``);
    ``note_no_probe=False``: no note for a folder without probes (``madara tables`` on cells alone)."""
    formats = check_formats(formats)
    results = _results(results_dir)
    figures, notes = figure2_figures(results)
    if not note_no_probe and not results.probes:
        notes = []
    out = Path(out_dir) if out_dir is not None else Path(results.root) / "figures"
    paths = [p for f in figures for p in save_figure(f.fig, out, f.stem, formats)]
    return FigureSet(tuple(paths), tuple(notes))


def figure2(results_dir: Path, out_dir: Path | None = None, benchmark: str = "conflicts") -> Path | None:
    """Figure 2 for one benchmark to ``out_dir/<figure2_stem>.png``; None without per-query values or matplotlib."""
    results = _results(results_dir)
    panels = figure2_panels(results, benchmark)
    if not panels:
        return None
    if pyplot() is None:
        import logging

        logging.getLogger(__name__).warning("Figure 2 skipped: %s", NO_MATPLOTLIB)
        return None
    out = Path(out_dir) if out_dir is not None else Path(results.root) / "figures"
    return save_figure(draw_figure2(panels, benchmark), out, figure2_stem(benchmark))[0]


# Where a label may go around its point (offset points, horizontal alignment), tried in turn.
_SPOTS = ((7, 4, "left"), (7, -12, "left"), (-7, 4, "right"), (-7, -12, "right"), (7, 14, "left"), (-7, 14, "right"),
          (7, -22, "left"), (-7, -22, "right"), (0, 16, "center"), (0, -24, "center"))


def place_labels(ax, items: Sequence[tuple[float, float, str]], fontsize: float, avoid: Sequence[tuple[float, float]] = (),
                 taken: list | None = None, **text_kw) -> list:
    """Name each point (x, y, text) where it overlaps no name placed before (``taken``, extended and
    returned) nor point in ``avoid``, inside the axes, else where it collides least. Call after the limits are set."""
    fig = ax.figure
    fig.canvas.draw()  # the transforms below need the final layout of this axes
    to_px = ax.transData.transform
    box = ax.get_window_extent()
    scale = fig.dpi / 72.0
    taken = [] if taken is None else taken
    marks = [tuple(to_px((x, y))) for x, y in [*avoid, *((x, y) for x, y, _ in items)]]
    for x, y, text in items:
        px, py = to_px((x, y))
        w, h = 0.6 * fontsize * len(text) * scale, 1.25 * fontsize * scale
        best, best_cost = None, math.inf
        for dx, dy, ha in _SPOTS:
            left = px + dx * scale - (w if ha == "right" else w / 2 if ha == "center" else 0)
            bottom = py + dy * scale
            rect = (left, bottom, left + w, bottom + h)
            outside = max(0.0, box.x0 - rect[0]) + max(0.0, rect[2] - box.x1) + max(0.0, box.y0 - rect[1]) + max(0.0, rect[3] - box.y1)
            overlap = sum(_overlap(rect, t) for t in taken)
            hits = sum(1 for mx, my in marks if rect[0] - 4 <= mx <= rect[2] + 4 and rect[1] - 4 <= my <= rect[3] + 4 and (mx, my) != (px, py))
            cost = 1000 * outside + overlap + 400 * hits
            if cost < best_cost:
                best, best_cost = (dx, dy, ha, rect), cost
            if cost == 0:
                break
        dx, dy, ha, rect = best
        taken.append(rect)
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), ha=ha, va="bottom", fontsize=fontsize,
                    annotation_clip=False, **text_kw)
    return taken


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _grid(plt, n: int, width: float, height: float):
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


# Text sizes (points) of every figure: about 1.15 CSS px per point on the report, none below 8.
TITLE, LABEL, TICK, NOTE = 11, 9, 8, 8


def rsc_probes(results: Results) -> dict[str, list[Any]]:
    """Probes with all three ρ̂, by benchmark, models in the paper's order (one probe per pair)."""
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    by_bench: dict[str, list[Any]] = {}
    for model, benchmark in sorted({(p.model, p.benchmark) for p in results.probes}, key=lambda mb: (mb[1], order.get(mb[0], 99), mb[0])):
        probe = results.probe(model, benchmark)
        if all(probe.rho_at(i) is not None for i in range(3)):
            by_bench.setdefault(benchmark, []).append(probe)
    return by_bench


LINE_STYLES = ("-", "--", ":", "-.")
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def draw_rsc_trend(by_bench: dict[str, list[Any]]):
    plt = pyplot()
    fig, axes = _grid(plt, len(by_bench), 6.0 if len(by_bench) == 1 else 4.6, 4.2)
    for ax, (benchmark, probes) in zip(axes, by_bench.items(), strict=True):
        for j, probe in enumerate(probes):
            # Models are told apart by grey, line style and marker: colour is for strategies.
            colour, ls, marker = model_shade(j, len(probes)), LINE_STYLES[j % len(LINE_STYLES)], MODEL_MARKERS[j % len(MODEL_MARKERS)]
            rho = [probe.rho_at(i) for i in range(3)]
            cis = [probe.ci_at(i) for i in range(3)]
            lower = [r - ci[0] if ci and ci[0] is not None else 0.0 for r, ci in zip(rho, cis)]
            upper = [ci[1] - r if ci and ci[1] is not None else 0.0 for r, ci in zip(rho, cis)]
            star = "?" if probe.rho_star is None else f"{probe.rho_star:+.1f}"
            name = f"{pv.MODEL_LABELS.get(probe.model, probe.model)}: {pv.CLASS_LABELS.get(probe.rsc_class, probe.rsc_class or '?')}, ρ*={star} (n={probe.n})"
            x = np.arange(1, 4) + (j - (len(probes) - 1) / 2) * 0.04
            ax.errorbar(x, rho, yerr=[np.maximum(lower, 0), np.maximum(upper, 0)], color=colour, ls=ls, marker=marker, capsize=2, lw=1.2,
                        label=name)
        ax.axhline(pv.TAU_RHO1, color="#555555", lw=0.8, ls="--")
        ax.text(3.3, pv.TAU_RHO1, f"ρ̂1 threshold {pv.TAU_RHO1} ", fontsize=NOTE, va="bottom", ha="right", color="#555555")
        ax.axhline(0, color="grey", lw=0.5, ls=":")
        ax.set_xticks([1, 2, 3], ["ρ̂1 shuffled", "ρ̂2 contradicted", "ρ̂3 random"], fontsize=TICK)
        ax.set_xlim(0.7, 3.3)
        ax.set_ylim(-1.08, 1.08)
        ax.set_ylabel("Spearman ρ̂ (score vs chain quality)", fontsize=LABEL)
        ax.set_title(pv.BENCHMARK_LABELS.get(benchmark, benchmark), fontsize=LABEL + 1)
        ax.legend(fontsize=NOTE, loc="lower left")
        ax.tick_params(axis="y", labelsize=TICK)
    suptitle(fig, "RSC probe: ρ̂1..3", fontsize=TITLE)
    fig.tight_layout()
    return fig


RSC_CAPTION = ("ρ̂1..3 of every probe (whiskers: bootstrap 95% CIs), one line per model, a panel per benchmark; the dashed line is "
               "the ρ̂1 threshold. A line that falls from shuffled to random chains is a quality-ordered scorer.")
