"""The figures of a results folder (``madara plot`` and the report page): ``em_by_strategy``
(each model-task's score per strategy, and Δ vs NF on shared queries), ``cost_vs_em`` (LLM
calls per query against the score, with the Pareto front), ``routing_map`` (the paper's ten
pairs and ours at (NF EM, ρ̂1)), ``rsc_trend`` and Figure 2 (:mod:`madara_cli.tables.figure`).

Intervals follow :mod:`madara_cli.core.stats`' small-n rule, so a 0/5 cell is drawn as
[0, 43%], never a certain 0. Where EM is 0 in every cell, F1 (else contains) stands in and
title and caption say so (:func:`shown_metric`). Numbers are the cells' own; nothing is re-run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from madara_cli import paper as pv
from madara_cli.core import stats
from madara_cli.results.health import MARK
from madara_cli.tables.figure import (
    LABEL,
    NO_MATPLOTLIB,
    NOTE,
    RSC_CAPTION,
    TICK,
    TITLE,
    Figure,
    FigureSet,
    _grid,
    check_formats,
    draw_rsc_trend,
    figure2_figures,
    place_labels,
    pyplot,
    rsc_probes,
    save_figure,
    suptitle,
)
from madara_cli.tables.lookup import Results, StoredCell, _results, probed_pairs
from madara_cli.tables.palette import strategy_style

N_RESAMPLES = 10_000
SEED = 0
_STRATEGY_ORDER = {s: i for i, s in enumerate(pv.STRATEGY_LABELS)}
METRIC_NAMES = {"em": "EM", "em_strict": "EM (strict)", "f1": "F1", "contains": "contains"}
# Stand-ins for an EM that is 0 everywhere: F1 credits a partly right answer, contains a gold alias anywhere.
FALLBACKS = ("f1", "contains")


def label(strategy: str) -> str:
    return pv.STRATEGY_LABELS.get(strategy, strategy)


@dataclass(frozen=True)
class StrategyPoint:
    """One strategy's cell in a model-task, with what the figures draw of it (fractions)."""

    strategy: str
    em: float
    n: int
    ci: stats.Interval | None  # the cell's own 95% interval (stats.mean_interval)
    paired: stats.Interval | None  # Δ vs NF on the shared queries (stats.difference_interval); None for NF and where there is no NF
    calls_per_query: float | None
    path: Path
    degraded: bool = False  # its scores mostly imputed (results/health.py): hatched, marked ◊


@dataclass(frozen=True)
class ModelTask:
    model: str
    benchmark: str
    retriever: str
    points: tuple[StrategyPoint, ...]
    differ: str = ""  # the settings its strategies' cells differ in besides the strategy (:func:`differences`)

    @property
    def title(self) -> str:
        head = f"{pv.MODEL_LABELS.get(self.model, self.model)} · {pv.BENCHMARK_LABELS.get(self.benchmark, self.benchmark)}"
        return head if self.retriever in ("bm25s", "pyserini") else f"{head} ({self.retriever})"


def _outcomes(cell: StoredCell, metric: str) -> dict[str, float]:
    rows = cell.predictions() or ()
    out = {}
    for row in rows:
        value = row.get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):  # bool is an int: True counts 1
            out[str(row.get("id"))] = float(value)
    return out


def model_tasks(source: Path | str | Results, metric: str = "em", n_resamples: int = N_RESAMPLES, seed: int = SEED) -> list[ModelTask]:
    """Every (model, benchmark, retriever) with finished cells, one per strategy (full runs, then
    the largest n, then seed 0), strategies in the paper's order."""
    results = _results(source)
    groups: dict[tuple[str, str, str], dict[str, StoredCell]] = {}
    for cell in results.cells:
        group = groups.setdefault((cell.model, cell.benchmark, cell.retriever), {})
        best = group.get(cell.strategy)
        rank = (cell.limit is not None, -cell.n, cell.seed or 0, cell.key)
        if best is None or rank < (best.limit is not None, -best.n, best.seed or 0, best.key):
            group[cell.strategy] = cell
    model_order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    bench_order = {b: i for i, b in enumerate(pv.BENCHMARK_LABELS)}
    out = []
    for (model, benchmark, retriever), cells in sorted(
        groups.items(), key=lambda kv: (model_order.get(kv[0][0], 99), kv[0][0], bench_order.get(kv[0][1], 99), kv[0][1], kv[0][2])
    ):
        outcome = {s: _outcomes(c, metric) for s, c in cells.items()}
        nf = outcome.get("nf")
        points = []
        order = sorted(cells, key=lambda s: (_STRATEGY_ORDER.get(s, 99), s))
        for strategy in order:
            cell = cells[strategy]
            value = cell.record.metric(metric)
            if not _finite(value):
                continue
            mine = outcome[strategy]
            paired = None
            shared = [i for i in mine if i in nf] if nf and strategy != "nf" else []
            if shared:
                a = np.asarray([mine[i] for i in shared])
                b = np.asarray([nf[i] for i in shared])
                paired = stats.difference_interval(a, b, n_resamples=n_resamples, seed=seed)
            ci = stats.mean_interval(np.asarray(list(mine.values())), n_resamples=n_resamples, seed=seed) if mine else None
            points.append(StrategyPoint(strategy, float(value), cell.n, ci, paired, cell.calls_per_query(), cell.path, cell.degraded))
        if points:
            out.append(ModelTask(model, benchmark, retriever, tuple(points), differences([cells[s] for s in order])))
    return out


def differences(cells: Sequence[StoredCell]) -> str:
    """What a panel's cells differ in besides strategy and prompts (``retriever.k 5 (NF), 10 (3-Agent)``), else empty."""
    from madara_cli.results.stored import _text, distinguishing

    keys = [k for k in distinguishing(cells) if not k.startswith(("strategy.", "prompts"))]
    keys += [k for k in ("limit", "seed") if len({_text(c.settings.get(k, getattr(c, k))) for c in cells}) > 1]
    parts = []
    for k in keys:
        values: dict[str, list[str]] = {}
        for c in cells:
            values.setdefault(_text(c.settings.get(k, getattr(c, k, None))), []).append(label(c.strategy))
        parts.append(f"{k} " + ", ".join(f"{v} ({', '.join(names)})" for v, names in values.items()))
    return "; ".join(parts)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the undominated (cost, EM) points by cost: the cheapest way to each EM level."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric, metric)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _values(results: Results, metric: str) -> list[float]:
    return [float(v) for v in (cell.record.metric(metric) for cell in results.cells) if _finite(v)]


def shown_metric(source: Path | str | Results, metric: str = "em") -> tuple[str, str]:
    """The metric the strategy figures show and why when not ``metric``: an EM 0 in every cell draws
    empty frames, so the first of :data:`FALLBACKS` some cell scores above 0 stands in."""
    results = _results(source)
    if metric not in ("em", "em_strict"):
        return metric, ""
    values = _values(results, metric)
    if not values or any(v > 0 for v in values):
        return metric, ""
    for fallback in FALLBACKS:
        if any(v > 0 for v in _values(results, fallback)):
            return fallback, (f"{metric_name(metric)} is 0 in every cell, so these figures show {metric_name(fallback)} "
                              f"(madara plot --metric {metric} draws {metric_name(metric)} anyway)")
    return metric, ""



def draw_em_by_strategy(tasks: Sequence[ModelTask], metric: str = "em", forced=False):
    """Per model-task: score bars with each cell's 95% interval above, Δ vs NF with its paired one below."""
    plt = pyplot()
    widest = max(len(t.points) for t in tasks)
    cols = min(3, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    width = max(6.0 if cols == 1 else 4.2, 0.6 * widest + 1.6)
    fig = plt.figure(figsize=(width * cols, 4.8 * rows + 0.4))
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[2.2, 1.0] * rows)
    name = metric_name(metric)
    for idx, task in enumerate(tasks):
        r, c = divmod(idx, cols)
        ax = fig.add_subplot(grid[2 * r, c])
        low = fig.add_subplot(grid[2 * r + 1, c], sharex=ax)
        xs = np.arange(len(task.points))
        for x, p in zip(xs, task.points, strict=True):
            colour, hatch, marker = strategy_style(p.strategy)
            ax.bar(x, 100 * p.em, color=colour, hatch=DEGRADED_HATCH if p.degraded else hatch, edgecolor=DEGRADED if p.degraded else "#333333",
                   linewidth=0.5, width=0.7)
            ax.annotate(f"{100 * p.em:.1f}{MARK if p.degraded else ''}", (x, 100 * p.em), textcoords="offset points", xytext=(0, 2),
                        ha="center", va="bottom", fontsize=NOTE, color=DEGRADED if p.degraded else "#222222")
            if p.ci is not None and p.ci.shown:
                lo, hi = 100 * p.ci.low, 100 * p.ci.high
                ax.errorbar(x + 0.22, 100 * p.em, yerr=[[max(0.0, 100 * p.em - lo)], [max(0.0, hi - 100 * p.em)]], fmt="none",
                            ecolor="black", elinewidth=0.8, capsize=3)
            if p.paired is not None:
                d = p.paired
                yerr = [[100 * (d.value - d.low)], [100 * (d.high - d.value)]] if d.shown else None
                low.errorbar(x, 100 * d.value, yerr=yerr, fmt=marker, markersize=7,
                             color=colour, markeredgecolor="#333333", ecolor="black", elinewidth=0.8, capsize=3)
                if d.excludes_zero():
                    low.annotate("*", (x, 100 * d.high), textcoords="offset points", xytext=(0, 1), ha="center", fontsize=TITLE)
        nf = next((p for p in task.points if p.strategy == "nf"), None)
        if nf is not None:
            ax.axhline(100 * nf.em, color="#555555", lw=0.8, ls="--")
        low.axhline(0, color="#555555", lw=0.8, ls="--")
        # Symmetric about 0 with room beyond the farthest whisker and its *, so no marker sits on the frame.
        reach = [abs(100 * v) for p in task.points if p.paired is not None
                 for v in (p.paired.value, p.paired.low, p.paired.high) if v is not None]
        span = max([5.0, *reach]) * 1.25
        low.set_ylim(-span, span)
        if not any(p.paired for p in task.points):
            low.text(0.5, 0.5, "no NF cell to pair with" if nf is None else "no other strategy shares NF's queries",
                     transform=low.transAxes, ha="center", va="center", fontsize=NOTE, color="#555555")
        ax.tick_params(axis="x", labelbottom=False)
        low.set_xticks(xs, [f"{label(p.strategy)}\nn={p.n}" for p in task.points], fontsize=TICK,
                       rotation=0 if len(task.points) <= 4 else 35, ha="center" if len(task.points) <= 4 else "right")
        low.set_xlim(-0.6, len(task.points) - 0.4)
        ax.set_ylim(0, 105)
        ax.set_ylabel(f"{name} %", fontsize=LABEL)
        low.set_ylabel("Δ vs NF (pp)", fontsize=LABEL)
        ax.set_title(_panel_title(task.title, task.differ), fontsize=LABEL + 1)
        if any(p.degraded for p in task.points):
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(facecolor="white", hatch=DEGRADED_HATCH, edgecolor=DEGRADED, label=DEGRADED_LABEL)],
                      fontsize=NOTE, loc="upper right", frameon=False)
        ax.tick_params(axis="y", labelsize=TICK)
        low.tick_params(axis="y", labelsize=TICK)
    suptitle(fig, f"{name} by strategy" + (" (EM is 0 everywhere)" if forced else ""), fontsize=TITLE)
    fig.tight_layout()
    return fig


DEGRADED, DEGRADED_HATCH = "#a03c00", "////"
DEGRADED_LABEL = f"{MARK} degraded cell: scores mostly imputed (madara show KEY)"


def _panel_title(title: str, differ: str) -> str:
    """A panel's title, and under it (wrapped) the settings its bars differ in."""
    import textwrap

    return title + "".join(f"\n{line}" for line in textwrap.wrap(f"bars differ in {differ}", 60) if differ)


def differ_caption(tasks: Sequence[ModelTask]) -> str:
    return "".join(f" {t.title}: its bars differ in {t.differ} besides the strategy." for t in tasks if t.differ)


def em_caption(metric: str, forced: str) -> str:
    name = metric_name(metric)
    how = ("Wilson 95% interval" if metric not in ("f1",) else
           f"bootstrap 95% CI from n = {stats.MIN_N_FOR_BOOTSTRAP} ({N_RESAMPLES:,} resamples, seed {SEED}; none below)")
    paired_how = "Newcombe paired 95% interval" if metric != "f1" else "paired-bootstrap 95% CI"
    lead = f"{forced}. " if forced else ""
    return (f"{lead}Top: each strategy's {name} with n under its bar; whiskers: the cell's {how}; dashed: NF. "
            f"Bottom: Δ vs NF on the queries both answered, {paired_how}; * where it excludes 0.")


def _n_text(points: Sequence[StrategyPoint]) -> str:
    ns = sorted({p.n for p in points})
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}–{ns[-1]}"


def _labels_by_spot(points: Sequence[StrategyPoint], xy: Sequence[tuple[float, float]]) -> dict[tuple[float, float], list[str]]:
    """The strategy labels at each drawn spot, in the paper's order."""
    spots: dict[tuple[float, float], list[str]] = {}
    for p, at in zip(points, xy, strict=True):
        spots.setdefault(at, []).append(label(p.strategy))
    return spots


def legend_columns(names: Sequence[str], width_in: float, size_pt: float) -> int:
    """The most legend columns whose entries (a marker and the name, about 0.55 em a character) fit
    ``width_in`` inches; matplotlib fills a legend column by column, each as wide as its widest entry."""
    wide = [0.5 + len(n) * size_pt * 0.55 / 72 for n in names]
    for ncol in range(len(names), 1, -1):
        rows = math.ceil(len(names) / ncol)
        if sum(max(wide[c * rows:(c + 1) * rows], default=0.0) for c in range(ncol)) <= 0.95 * width_in:
            return ncol
    return 1


def draw_cost_vs_em(tasks: Sequence[ModelTask], metric: str = "em", forced=False):
    from matplotlib.ticker import ScalarFormatter

    plt = pyplot()
    fig, axes = _grid(plt, len(tasks), 6.0 if len(tasks) == 1 else 4.4, 4.2)
    name = metric_name(metric)
    drawn: set[str] = set()
    labels = []
    for ax, task in zip(axes, tasks, strict=True):
        points = [p for p in task.points if p.calls_per_query]
        xy = [(p.calls_per_query, 100 * p.em) for p in points]
        front = pareto_front(xy)
        seen: dict[tuple[float, float], int] = {}
        for i, p in enumerate(points):
            colour, _, marker = strategy_style(p.strategy)
            # Strategies at the same cost and score are drawn as nested, shrinking markers so each stays visible.
            dup = seen[xy[i]] = seen.get(xy[i], -1) + 1
            ax.scatter(*xy[i], color=colour, marker=marker, s=90 * 0.55**dup, zorder=3 + dup, edgecolors="#333333", linewidths=0.5)
            if p.degraded:
                ax.scatter(*xy[i], marker="D", s=260, facecolors="none", edgecolors=DEGRADED, linewidths=1.2, zorder=8)
                drawn.add(MARK)
            if p.ci is not None and p.ci.shown and dup == 0:
                ax.errorbar(*xy[i], yerr=[[max(0.0, xy[i][1] - 100 * p.ci.low)], [max(0.0, 100 * p.ci.high - xy[i][1])]], fmt="none",
                            ecolor="#999999", elinewidth=0.6, capsize=2, zorder=1)
            drawn.add(p.strategy)
        fx = [xy[i][0] for i in front]
        fy = [xy[i][1] for i in front]
        ax.step(fx, fy, where="post", color="black", lw=1, zorder=2)
        ax.scatter(fx, fy, s=190, facecolors="none", edgecolors="black", linewidths=1, zorder=9)
        costs = [c for c, _ in xy]
        if max(costs) / min(costs) >= 10:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
        # Room around the outermost points, so no marker or name sits on the frame.
        lo, hi = min(costs), max(costs)
        if ax.get_xscale() == "log":
            ax.set_xlim(lo / 1.6, hi * 1.6)
        else:
            pad = max(0.6, 0.12 * (hi - lo))
            ax.set_xlim(max(0.0, lo - pad), hi + pad)
        ax.set_ylim(-6, 106)
        labels.append((ax, [(*spot, ", ".join(names)) for spot, names in _labels_by_spot(points, xy).items()]))
        ax.set_xlabel("LLM calls per query", fontsize=LABEL)
        ax.set_ylabel(f"{name} %", fontsize=LABEL)
        ax.set_title(_panel_title(f"{task.title} ({_n_text(points)})", task.differ), fontsize=LABEL + 1)
        ax.tick_params(labelsize=TICK)
    from matplotlib.lines import Line2D

    order = sorted(drawn - {MARK}, key=lambda s: (_STRATEGY_ORDER.get(s, 99), s))
    proxies = [Line2D([], [], ls="", marker=strategy_style(s)[2], markersize=8, markerfacecolor=strategy_style(s)[0],
                      markeredgecolor="#333333", markeredgewidth=0.5) for s in order]  # one size in the legend, nested or not
    proxies.append(Line2D([], [], ls="-", color="black", marker="o", markersize=11, markerfacecolor="none", markeredgecolor="black"))
    names = [label(s) for s in order] + ["Pareto front"]
    if MARK in drawn:
        proxies.append(Line2D([], [], ls="", marker="D", markersize=11, markerfacecolor="none", markeredgecolor=DEGRADED))
        names.append(DEGRADED_LABEL)
    ncol = legend_columns(names, fig.get_figwidth(), TICK)
    rows = math.ceil(len(names) / ncol)
    fig.legend(proxies, names, loc="lower center", ncol=ncol, fontsize=TICK, frameon=False)
    suptitle(fig, f"Cost vs {name}" + (" (EM is 0 everywhere)" if forced else ""), fontsize=TITLE)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.4, 0.28 * rows / height + 0.02), 1, 1))
    # Names go on once the layout is final; strategies on one spot share one label.
    for ax, items in labels:
        place_labels(ax, items, NOTE, color="#222222", zorder=10)
    return fig


def cost_caption(metric: str, forced: str) -> str:
    lead = f"{forced}. " if forced else ""
    return (f"{lead}One named point per strategy: LLM calls per query (requests ÷ n, cached or not: what the strategy needs) "
            f"against {metric_name(metric)}; grey whiskers: its 95% interval. The step line through the ringed points is the "
            "Pareto front: no cheaper strategy scores higher.")


_CLASS_MARKERS = {"quality-ordered": "o", "stochastic": "s", "degenerate": "^"}
NO_RHO = -1.25  # where a pair without ρ̂1 (degenerate scores) sits: a grey strip inside the axes, under -1


def paper_pairs() -> list[tuple[str, str, str, float, float, str]]:
    """Table 2's ten routed pairs: (model, benchmark, class, NF EM %, ρ̂1, route)."""
    return [(m, b, *(pv.lookup(pv.TABLE2, m, b, c) for c in ("rsc_class", "nf", "rho1", "strategy"))) for m, b in pv.ROUTING_PAIRS]


def draw_routing_map(probes: Sequence[Any], keyed: bool = True):
    """The paper's ten pairs (hollow, numbered) and ours (filled, named) at (NF EM, ρ̂1) with the
    router's thresholds; colour the route, marker the RSC class. Not ``keyed``: no legend or key
    in the image (the report prints :func:`routing_key` under it)."""
    plt = pyplot()
    fig = plt.figure(figsize=(8.8, 4.9) if keyed else (6.4, 4.9))
    ax = fig.add_axes((0.08, 0.12, 0.56, 0.76) if keyed else (0.11, 0.12, 0.86, 0.76))
    routes: dict[str, str] = {}
    numbers: list[tuple[float, float, str]] = []
    key = ["Paper (Table 2), hollow:"]
    for number, (model, bench, cls, nf, rho1, route) in enumerate(paper_pairs(), 1):
        colour = strategy_style(route)[0]
        routes.setdefault(route, colour)
        ax.scatter(nf, rho1, facecolors="white", edgecolors=colour, marker=_CLASS_MARKERS.get(cls, "D"), s=70, linewidths=1.6, zorder=3)
        numbers.append((nf, rho1, str(number)))
        key.append(f"{number:>2}  {pv.MODEL_LABELS.get(model, model)} · {pv.BENCHMARK_LABELS.get(bench, bench)} → {label(route)}")
    ours = []
    for p in probes:
        nf = 100 * p.em_nf if isinstance(p.em_nf, (int, float)) else None
        if nf is None:
            continue
        rho1 = p.rho_at(0)
        y = rho1 if rho1 is not None else NO_RHO
        colour = strategy_style(p.route or "")[0]
        routes.setdefault(p.route or "?", colour)
        ax.scatter(nf, y, color=colour, marker=_CLASS_MARKERS.get(p.rsc_class, "D"), s=90, edgecolors="#222222", linewidths=0.8, zorder=4)
        name = f"{pv.MODEL_LABELS.get(p.model, p.model)} · {pv.BENCHMARK_LABELS.get(p.benchmark, p.benchmark)}"
        ours.append((nf, y, name))
    ax.axvline(pv.TAU_NF, color="#555555", lw=0.8, ls="--")
    ax.axhline(pv.TAU_RHO1, xmin=(pv.TAU_NF + 4) / 108, color="#555555", lw=0.8, ls="--")
    ax.axhspan(-1.45, -1.08, color="#eeeeee", zorder=0)
    ax.text(101, NO_RHO, "no ρ̂1 (degenerate)", fontsize=NOTE, va="center", ha="right", color="#555555")
    ax.text(pv.TAU_NF + 1, 1.12, f"τ_NF {pv.TAU_NF:g}%", fontsize=NOTE, color="#555555", va="top")
    ax.text(45, pv.TAU_RHO1 - 0.04, f"ρ̂1 {pv.TAU_RHO1:g}", fontsize=NOTE, color="#555555", va="top", ha="center")
    ax.text(pv.TAU_NF / 2, 1.12, "→ PDE", fontsize=NOTE, color="#777777", va="top", ha="center")
    ax.set_xlim(-4, 104)  # room for a marker at 0 or 100
    ax.set_ylim(-1.45, 1.18)
    ax.set_yticks([-1.0, -0.5, 0.0, 0.5, 1.0])
    # Named once the limits are set: ours first (bold), then the paper's numbers around them.
    taken = place_labels(ax, ours, NOTE, avoid=[(x, y) for x, y, _ in numbers], fontweight="bold")
    place_labels(ax, numbers, NOTE, avoid=[(x, y) for x, y, _ in ours], taken=taken, color="#444444")
    ax.set_xlabel("No-Filter EM % (ours: the probe's calibration queries)", fontsize=LABEL)
    ax.set_ylabel("ρ̂1 (shuffled chains)", fontsize=LABEL)
    ax.tick_params(labelsize=TICK)
    fig.suptitle("Routing map", fontsize=TITLE)
    if not keyed:
        return fig
    from matplotlib.lines import Line2D

    order = sorted(routes, key=lambda s: (_STRATEGY_ORDER.get(s, 99), s))
    handles = [Line2D([], [], ls="", marker="o", markersize=8, color=routes[r], markeredgecolor="#333333", label=f"→ {label(r)}") for r in order]
    handles += [Line2D([], [], ls="", marker=m, markersize=8, color="white", markeredgecolor="#333333", label=pv.CLASS_LABELS.get(k, k))
                for k, m in _CLASS_MARKERS.items()]
    fig.legend(handles=handles, fontsize=NOTE, loc="lower left", bbox_to_anchor=(0.655, 0.08), ncol=2, frameon=False,
               title="route (colour) · RSC class (marker)", title_fontsize=NOTE)
    fig.text(0.665, 0.88, "\n".join(key), fontsize=NOTE, va="top", ha="left", family="DejaVu Sans")
    return fig


_CLASS_SYMBOLS = {"quality-ordered": "○", "stochastic": "□", "degenerate": "△"}


def routing_key() -> tuple[str, ...]:
    """The routing map's key as text: the RSC classes' markers, then the paper's numbered pairs and routes."""
    classes = "colour: the route (the strategies' legend above); marker: the RSC class, " + ", ".join(f"{_CLASS_SYMBOLS[k]} {pv.CLASS_LABELS.get(k, k)}" for k in _CLASS_MARKERS)
    pairs = [f"{i}. {pv.MODEL_LABELS.get(m, m)} · {pv.BENCHMARK_LABELS.get(b, b)} → {label(r)}"
             for i, (m, b, _, _, _, r) in enumerate(paper_pairs(), 1)]
    return (classes, "the paper's pairs (hollow, numbered): " + "; ".join(pairs))


ROUTING_CAPTION = ("Where each model-task pair sits against the router's thresholds: No-Filter EM across (τ_NF = 30%), ρ̂1 up "
                   "(0.5 splits weak from strong coupling above τ_NF). Hollow, numbered: the paper's ten pairs (Table 2); filled, "
                   "named: ours, at the NF EM of the probe's calibration queries (what the router reads). Colour is the route, "
                   "marker the RSC class; a pair without ρ̂1 (degenerate scores) sits on the grey strip.")


def build_figures(source: Path | str | Results, metric: str = "em", per_panel: bool = False) -> tuple[list[Figure], list[str]]:
    """Every figure the results allow, and a note per one skipped; ``per_panel`` (the report) draws a
    figure per model-task and benchmark, so each fits a page column. The caller saves and closes them."""
    results = _results(source)
    if pyplot() is None:
        return [], [f"figures skipped: {NO_MATPLOTLIB}"]
    figures, notes = [], []
    shown, forced = shown_metric(results, metric)
    tasks = model_tasks(results, shown)
    name = metric_name(shown)
    drawn = lambda ts: tuple(dict.fromkeys(p.strategy for t in ts for p in t.points))  # noqa: E731
    panels = (lambda items: [(f"-{i}", [item]) for i, item in enumerate(items, 1)]) if per_panel else (lambda items: [("", list(items))])
    if tasks:
        for suffix, group in panels(tasks):
            figures.append(Figure(f"em_by_strategy{suffix}", f"{name} by strategy", em_caption(shown, forced) + differ_caption(group),
                                  draw_em_by_strategy(group, shown, bool(forced)), drawn(group), shown))
        costed = [ModelTask(t.model, t.benchmark, t.retriever, tuple(p for p in t.points if p.calls_per_query), t.differ) for t in tasks]
        costed = [t for t in costed if t.points]
        if costed:
            for suffix, group in panels(costed):
                figures.append(Figure(f"cost_vs_em{suffix}", f"Cost vs {name}", cost_caption(shown, forced) + differ_caption(group),
                                      draw_cost_vs_em(group, shown, bool(forced)), drawn(group), shown))
        else:
            notes.append("cost-vs-EM figure skipped: no cell records its LLM calls (accounting.requests or calls_issued)")
    else:
        what = f"no finished cell in {results.root}" if not results.cells else f"no cell records {metric}"
        notes.append(f"EM-by-strategy and cost-vs-EM figures skipped: {what}")
    pairs = probed_pairs(results)
    routed = [p for p in (results.probe(m, b) for m, b in pairs) if isinstance(p.em_nf, (int, float)) and p.route]
    if not routed:
        notes.append("routing map: the paper's pairs only; " + ("no probe of ours records its NF EM and route" if results.probes
                                                                 else f"no RSC probe in {results.root}"))
    routes = tuple(dict.fromkeys([*(r for *_, r in paper_pairs()), *(p.route for p in routed)]))
    figures.append(Figure("routing_map", "Routing map", ROUTING_CAPTION, draw_routing_map(routed, keyed=not per_panel), routes, "em",
                          routing_key() if per_panel else ()))
    by_bench = rsc_probes(results)
    if by_bench:
        for suffix, group in panels(by_bench.items()):
            figures.append(Figure(f"rsc_trend{suffix}", "RSC probe: ρ̂1..3", RSC_CAPTION, draw_rsc_trend(dict(group))))
    else:
        notes.append("ρ̂1..3 figure skipped: " + ("no probe records all three ρ̂" if results.probes else f"no RSC probe in {results.root}"))
    fig2, fig2_notes = figure2_figures(results)
    return figures + fig2, notes + fig2_notes


def write_plots(results_dir: Path | str, out_dir: Path | None = None, formats: Sequence[str] = ("png", "pdf"), metric: str = "em") -> FigureSet:
    """Write every figure as ``out_dir/<stem>.<fmt>`` (default ``results_dir/figures``); ValueError for a bad format, metric or folder."""
    formats = check_formats(formats)
    from madara_cli.tables.lookup import TABLE_METRICS

    if metric not in TABLE_METRICS:
        raise ValueError(f"unknown metric '{metric}'; valid: {', '.join(TABLE_METRICS)}")
    if not isinstance(results_dir, Results) and not Path(results_dir).is_dir():
        raise ValueError(f"no results folder at {results_dir} (run something first, or pass --results DIR)")
    results = _results(results_dir)
    figures, notes = build_figures(results, metric)
    out = Path(out_dir) if out_dir is not None else Path(results.root) / "figures"
    paths = [p for f in figures for p in save_figure(f.fig, out, f.stem, formats)]
    return FigureSet(tuple(paths), tuple(notes))
