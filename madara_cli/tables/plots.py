"""The figures of a results folder (``madara plot`` and the report page).

- ``em_by_strategy``: each model-task's EM per strategy, n under each bar, whiskers the
  cell's 95% interval; under it, Δ = strategy − NF on the queries both answered with
  its paired 95% interval, ``*`` where that interval excludes 0. Both follow the one
  small-n rule of :mod:`madara_cli.stats` (``mean_interval``, ``difference_interval``:
  Wilson and Newcombe's paired score interval for EM, as ``madara compare``), so a
  0/5 cell is drawn as [0, 43%], never as a certain 0.
- ``cost_vs_em``: LLM calls per query (requests, cached or not, ÷ n: what the strategy
  needs) against EM, one labelled point per strategy with its EM interval, the Pareto
  front (fewest calls for the EM) drawn as a step line through ringed points.
- ``routing_map``: every probed pair at (NF EM, ρ̂1) with the τ_NF and ρ̂1 thresholds,
  coloured by the route its probe recorded, marked by its RSC class.
- ``rsc_trend``: ρ̂1..3 (shuffled, contradicted, random chain) of every probe, one line
  per model with its bootstrap CIs, per benchmark; the legend gives ρ* and the class.
- Figure 2 for every probed benchmark (:mod:`madara_cli.tables.figure`).

Everything is read from the results store; the numbers are the cells' own (EM as the
record holds it, the per-query outcomes for the CIs); nothing is re-run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from madara_cli import paper as pv
from madara_cli import stats
from madara_cli.tables.figure import (
    NO_MATPLOTLIB,
    OKABE_ITO,
    FigureSet,
    check_formats,
    figure2_figures,
    pyplot,
    save_figure,
    suptitle,
)
from madara_cli.tables.lookup import Results, StoredCell, _results

N_RESAMPLES = 10_000
SEED = 0
HATCHES = ("", "//", "..", "xx")
MARKERS = ("o", "s", "^", "D")
_STRATEGY_ORDER = {s: i for i, s in enumerate(pv.STRATEGY_LABELS)}


def strategy_style(strategy: str) -> tuple[str, str, str]:
    """(colour, hatch, marker) of a strategy, the same in every figure: eight Okabe-Ito
    colours, then the same colours again with a hatch and another marker."""
    i = _STRATEGY_ORDER.get(strategy, len(_STRATEGY_ORDER) + sum(map(ord, strategy)) % 16)
    return OKABE_ITO[i % len(OKABE_ITO)], HATCHES[(i // len(OKABE_ITO)) % len(HATCHES)], MARKERS[(i // len(OKABE_ITO)) % len(MARKERS)]


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


@dataclass(frozen=True)
class ModelTask:
    model: str
    benchmark: str
    retriever: str
    points: tuple[StrategyPoint, ...]

    @property
    def title(self) -> str:
        head = f"{pv.MODEL_LABELS.get(self.model, self.model)} · {pv.BENCHMARK_LABELS.get(self.benchmark, self.benchmark)}"
        return head if self.retriever in ("bm25s", "pyserini") else f"{head} ({self.retriever})"

    @property
    def has_nf(self) -> bool:
        return any(p.strategy == "nf" for p in self.points)


def _outcomes(cell: StoredCell, metric: str) -> dict[str, float]:
    rows = cell.predictions() or ()
    out = {}
    for row in rows:
        value = row.get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):  # bool is an int: True counts 1
            out[str(row.get("id"))] = float(value)
    return out


def _own_ci(values: Sequence[float], n_resamples: int, seed: int) -> stats.Interval | None:
    if not values:
        return None
    return stats.mean_interval(np.asarray(values), n_resamples=n_resamples, seed=seed)


def model_tasks(source: Path | str | Results, metric: str = "em", n_resamples: int = N_RESAMPLES, seed: int = SEED) -> list[ModelTask]:
    """Every (model, benchmark, retriever) with finished cells, one cell per strategy (the
    one :meth:`Results.find` would pick: full runs over ``limit``-ed ones, then the
    largest n, then seed 0), strategies in the paper's order."""
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
        for strategy in sorted(cells, key=lambda s: (_STRATEGY_ORDER.get(s, 99), s)):
            cell = cells[strategy]
            value = cell.record.metric(metric)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            mine = outcome[strategy]
            paired = None
            shared = [i for i in mine if i in nf] if nf and strategy != "nf" else []
            if shared:
                a = np.asarray([mine[i] for i in shared])
                b = np.asarray([nf[i] for i in shared])
                paired = stats.difference_interval(a, b, n_resamples=n_resamples, seed=seed)
            ci = _own_ci(list(mine.values()), n_resamples, seed)
            points.append(StrategyPoint(strategy, float(value), cell.n, ci, paired, cell.calls_per_query(), cell.path))
        if points:
            out.append(ModelTask(model, benchmark, retriever, tuple(points)))
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (cost no higher and EM no lower,
    one of them strictly), ordered by cost: the cheapest way to each EM level."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _grid(plt, n: int, width: float, height: float):
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def draw_em_by_strategy(tasks: Sequence[ModelTask], metric: str = "em"):
    """Per model-task: EM bars with each cell's 95% interval above, Δ vs NF with its
    paired 95% interval below, on the same strategies (the rule of :mod:`madara_cli.stats`)."""
    plt = pyplot()
    widest = max(len(t.points) for t in tasks)
    cols = min(3, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    width = max(3.2, 0.55 * widest + 1.2)
    fig = plt.figure(figsize=(width * cols, 5.2 * rows))
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[2.2, 1.0] * rows)
    name = "EM" if metric == "em" else metric
    for idx, task in enumerate(tasks):
        r, c = divmod(idx, cols)
        ax = fig.add_subplot(grid[2 * r, c])
        low = fig.add_subplot(grid[2 * r + 1, c], sharex=ax)
        xs = np.arange(len(task.points))
        for x, p in zip(xs, task.points, strict=True):
            colour, hatch, marker = strategy_style(p.strategy)
            ax.bar(x, 100 * p.em, color=colour, hatch=hatch, edgecolor="#333333", linewidth=0.5, alpha=0.9)
            if p.ci is not None and p.ci.shown:
                lo, hi = 100 * p.ci.low, 100 * p.ci.high
                ax.errorbar(x, 100 * p.em, yerr=[[max(0.0, 100 * p.em - lo)], [max(0.0, hi - 100 * p.em)]], fmt="none", ecolor="black",
                            elinewidth=0.8, capsize=3)
            if p.paired is not None:
                d = p.paired
                yerr = [[100 * (d.value - d.low)], [100 * (d.high - d.value)]] if d.shown else None
                low.errorbar(x, 100 * d.value, yerr=yerr, fmt=marker,
                             color=colour, markeredgecolor="#333333", ecolor="black", elinewidth=0.8, capsize=3)
                if d.excludes_zero():
                    low.annotate("*", (x, 100 * d.high), textcoords="offset points", xytext=(0, 1), ha="center", fontsize=10)
        nf = next((p for p in task.points if p.strategy == "nf"), None)
        if nf is not None:
            ax.axhline(100 * nf.em, color="#555555", lw=0.8, ls="--")
        low.axhline(0, color="#555555", lw=0.8, ls="--")
        if not any(p.paired for p in task.points):
            low.text(0.5, 0.5, "no NF cell to pair with" if nf is None else "no other strategy shares NF's queries",
                     transform=low.transAxes, ha="center", va="center", fontsize=7, color="#555555")
        ax.tick_params(axis="x", labelbottom=False)
        low.set_xticks(xs, [f"{label(p.strategy)}\nn={p.n}" for p in task.points], rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 105)
        ax.set_ylabel(f"{name} %", fontsize=8)
        low.set_ylabel("Δ vs NF (pp)", fontsize=7)
        ax.set_title(task.title, fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        low.tick_params(axis="y", labelsize=7)
    how = ("Wilson 95% interval" if metric != "f1" else f"bootstrap 95% CI from n = {stats.MIN_N_FOR_BOOTSTRAP} ({N_RESAMPLES:,} resamples, seed {SEED})")
    paired_how = ("Newcombe paired 95% interval" if metric != "f1" else "paired-bootstrap 95% CI")
    suptitle(fig, f"{name} by strategy. Top: each cell's {how} (dashed: NF). Bottom: Δ vs NF on shared queries, "
        f"{paired_how}; * interval excludes 0",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def _n_text(points: Sequence[StrategyPoint]) -> str:
    ns = sorted({p.n for p in points})
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}–{ns[-1]}"


def _labels_by_spot(points: Sequence[StrategyPoint], xy: Sequence[tuple[float, float]]) -> dict[tuple[float, float], list[str]]:
    """The strategy labels at each drawn spot, in the paper's order."""
    spots: dict[tuple[float, float], list[str]] = {}
    for p, at in zip(points, xy, strict=True):
        spots.setdefault(at, []).append(label(p.strategy))
    return spots


def draw_cost_vs_em(tasks: Sequence[ModelTask], metric: str = "em"):
    from matplotlib.ticker import ScalarFormatter

    plt = pyplot()
    fig, axes = _grid(plt, len(tasks), 4.2, 3.6)
    name = "EM" if metric == "em" else metric
    drawn: set[str] = set()
    for ax, task in zip(axes, tasks, strict=True):
        points = [p for p in task.points if p.calls_per_query]
        xy = [(p.calls_per_query, 100 * p.em) for p in points]
        front = pareto_front(xy)
        seen: dict[tuple[float, float], int] = {}
        for i, p in enumerate(points):
            colour, _, marker = strategy_style(p.strategy)
            # Strategies at the same cost and EM are drawn as nested, shrinking markers so each stays visible.
            dup = seen[xy[i]] = seen.get(xy[i], -1) + 1
            ax.scatter(*xy[i], color=colour, marker=marker, s=70 * 0.55**dup, zorder=3 + dup, edgecolors="#333333", linewidths=0.5)
            if p.ci is not None and p.ci.shown and dup == 0:
                ax.errorbar(*xy[i], yerr=[[max(0.0, xy[i][1] - 100 * p.ci.low)], [max(0.0, 100 * p.ci.high - xy[i][1])]], fmt="none",
                            ecolor="#999999", elinewidth=0.6, capsize=2, zorder=1)
            drawn.add(p.strategy)
        # Each point is named beside it; strategies on one spot share one label, so seven
        # overlapping strategies read as one list instead of an unlabelled pile.
        for spot, names in _labels_by_spot(points, xy).items():
            ax.annotate(", ".join(names), spot, textcoords="offset points", xytext=(6, 4), fontsize=6, color="#222222", zorder=10)
        fx = [xy[i][0] for i in front]
        fy = [xy[i][1] for i in front]
        ax.step(fx, fy, where="post", color="black", lw=1, zorder=2)
        ax.scatter(fx, fy, s=160, facecolors="none", edgecolors="black", linewidths=1, zorder=9)
        costs = [c for c, _ in xy]
        if max(costs) / min(costs) >= 10:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("LLM calls per query", fontsize=8)
        ax.set_ylabel(f"{name} %", fontsize=8)
        ax.set_ylim(-4, 104)  # room for a marker at 0 or 100
        ax.set_title(f"{task.title} ({_n_text(points)})", fontsize=9)
        ax.tick_params(labelsize=7)
    from matplotlib.lines import Line2D

    order = sorted(drawn, key=lambda s: (_STRATEGY_ORDER.get(s, 99), s))
    proxies = [Line2D([], [], ls="", marker=strategy_style(s)[2], markersize=7, markerfacecolor=strategy_style(s)[0],
                      markeredgecolor="#333333", markeredgewidth=0.5) for s in order]  # one size in the legend, nested or not
    proxies.append(Line2D([], [], ls="-", color="black", marker="o", markersize=10, markerfacecolor="none", markeredgecolor="black"))
    names = [label(s) for s in order] + ["Pareto front"]
    ncol = max(1, min(len(names), int(fig.get_figwidth() / 1.0)))
    rows = math.ceil(len(names) / ncol)
    fig.legend(proxies, names, loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    suptitle(fig, f"Cost vs {name}: one labelled point per strategy (grey: its 95% interval); calls = requests ÷ n (cached or not)", fontsize=9)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.4, 0.25 * rows / height + 0.02), 1, 1))
    return fig


def rsc_probes(results: Results) -> dict[str, list[Any]]:
    """Probes with all three ρ̂, by benchmark, models in the paper's order (one probe per pair)."""
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    by_bench: dict[str, list[Any]] = {}
    for model, benchmark in sorted({(p.model, p.benchmark) for p in results.probes}, key=lambda mb: (mb[1], order.get(mb[0], 99), mb[0])):
        probe = results.probe(model, benchmark)
        if all(probe.rho_at(i) is not None for i in range(3)):
            by_bench.setdefault(benchmark, []).append(probe)
    return by_bench


def draw_rsc_trend(by_bench: dict[str, list[Any]]):
    plt = pyplot()
    fig, axes = _grid(plt, len(by_bench), 4.4, 3.6)
    for ax, (benchmark, probes) in zip(axes, by_bench.items(), strict=True):
        for j, probe in enumerate(probes):
            colour, marker = OKABE_ITO[j % len(OKABE_ITO)], MARKERS[(j // len(OKABE_ITO)) % len(MARKERS)]
            rho = [probe.rho_at(i) for i in range(3)]
            cis = [probe.ci_at(i) for i in range(3)]
            lower = [r - ci[0] if ci and ci[0] is not None else 0.0 for r, ci in zip(rho, cis)]
            upper = [ci[1] - r if ci and ci[1] is not None else 0.0 for r, ci in zip(rho, cis)]
            star = "?" if probe.rho_star is None else f"{probe.rho_star:+.1f}"
            name = f"{pv.MODEL_LABELS.get(probe.model, probe.model)}: {pv.CLASS_LABELS.get(probe.rsc_class, probe.rsc_class or '?')}, ρ*={star} (n={probe.n})"
            x = np.arange(1, 4) + (j - (len(probes) - 1) / 2) * 0.04
            ax.errorbar(x, rho, yerr=[np.maximum(lower, 0), np.maximum(upper, 0)], color=colour, marker=marker, capsize=2, lw=1.2, label=name)
        ax.axhline(pv.TAU_RHO1, color="#555555", lw=0.8, ls="--")
        ax.text(3.3, pv.TAU_RHO1, f"ρ̂1 threshold {pv.TAU_RHO1}", fontsize=6, va="bottom", ha="right", color="#555555")
        ax.axhline(0, color="grey", lw=0.5, ls=":")
        ax.set_xticks([1, 2, 3], ["ρ̂1 shuffled", "ρ̂2 contradicted", "ρ̂3 random"], fontsize=7)
        ax.set_xlim(0.7, 3.3)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel("Spearman ρ̂ (score vs chain quality)", fontsize=7)
        ax.set_title(f"RSC probe on {pv.BENCHMARK_LABELS.get(benchmark, benchmark)}", fontsize=9)
        ax.legend(fontsize=6, loc="lower left")
        ax.tick_params(axis="y", labelsize=7)
    suptitle(fig, "ρ̂1..3 per probe (whiskers: bootstrap 95% CIs); a falling line is a quality-ordered scorer", fontsize=9)
    fig.tight_layout()
    return fig


_CLASS_MARKERS = {"quality-ordered": "o", "stochastic": "s", "degenerate": "^"}


def draw_routing_map(probes: Sequence[Any]):
    """Each probed pair at (NF EM, ρ̂1) with the thresholds the router uses: colour is
    the route its probe recorded, marker the RSC class. Pairs without ρ̂1 sit on a strip
    under the axis."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    routes: dict[str, Any] = {}
    for p in probes:
        nf = 100 * p.em_nf if isinstance(p.em_nf, (int, float)) else None
        if nf is None:
            continue
        rho1 = p.rho_at(0)
        y = rho1 if rho1 is not None else -1.25
        colour = strategy_style(p.route or "")[0]
        routes.setdefault(p.route or "?", colour)
        ax.scatter(nf, y, color=colour, marker=_CLASS_MARKERS.get(p.rsc_class, "D"), s=60, edgecolors="#333333", linewidths=0.5, zorder=3)
        ax.annotate(f"{pv.MODEL_LABELS.get(p.model, p.model)} · {pv.BENCHMARK_LABELS.get(p.benchmark, p.benchmark)} (n={p.n})", (nf, y),
                    textcoords="offset points", xytext=(5, 3), fontsize=6)
    ax.axvline(pv.TAU_NF, color="#555555", lw=0.8, ls="--")
    ax.axhline(pv.TAU_RHO1, color="#555555", lw=0.8, ls="--")
    ax.axhspan(-1.4, -1.1, color="#eeeeee", zorder=0)
    ax.text(99, -1.25, "no ρ̂1", fontsize=6, va="center", ha="right", color="#555555")
    ax.text(pv.TAU_NF, 1.02, f" τ_NF {pv.TAU_NF:g}%", fontsize=6, color="#555555", va="bottom")
    ax.set_xlim(-3, 103)  # room for a marker at 0 or 100
    ax.set_ylim(-1.4, 1.1)
    ax.set_xlabel("No-Filter EM % (calibration)", fontsize=8)
    ax.set_ylabel("ρ̂1 (shuffled chains)", fontsize=8)
    ax.tick_params(labelsize=7)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=c, markeredgecolor="#333333", label=f"→ {label(r)}") for r, c in routes.items()]
    handles += [Line2D([], [], ls="", marker=m, color="white", markeredgecolor="#333333", label=pv.CLASS_LABELS.get(k, k))
                for k, m in _CLASS_MARKERS.items()]
    ax.legend(handles=handles, fontsize=6, loc="upper right", ncol=2)
    suptitle(fig, "Routing decisions: each probed pair's NF EM and ρ̂1, coloured by its route, marked by its RSC class", fontsize=9)
    fig.tight_layout()
    return fig


def build_figures(source: Path | str | Results, metric: str = "em") -> tuple[list[tuple[str, str, Any]], list[str]]:
    """Every figure the results allow: ([(file stem, title, matplotlib figure)], one note
    per figure skipped and why). The caller saves and closes the figures."""
    results = _results(source)
    if pyplot() is None:
        return [], [f"figures skipped: {NO_MATPLOTLIB}"]
    figures, notes = [], []
    tasks = model_tasks(results, metric)
    if tasks:
        figures.append(("em_by_strategy", "EM by strategy (95% intervals)", draw_em_by_strategy(tasks, metric)))
        costed = [ModelTask(t.model, t.benchmark, t.retriever, tuple(p for p in t.points if p.calls_per_query)) for t in tasks]
        costed = [t for t in costed if t.points]
        if costed:
            figures.append(("cost_vs_em", "Cost (LLM calls per query) vs EM", draw_cost_vs_em(costed, metric)))
        else:
            notes.append("cost-vs-EM figure skipped: no cell records its LLM calls (accounting.requests or calls_issued)")
    else:
        what = f"no finished cell in {results.root}" if not results.cells else f"no cell records {metric}"
        notes.append(f"EM-by-strategy and cost-vs-EM figures skipped: {what}")
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    pairs = sorted({(p.model, p.benchmark) for p in results.probes}, key=lambda mb: (order.get(mb[0], 99), mb[0], mb[1]))
    routed = [p for p in (results.probe(m, b) for m, b in pairs) if isinstance(p.em_nf, (int, float)) and p.route]
    if routed:
        figures.append(("routing_map", "Routing decisions (NF EM vs ρ̂1)", draw_routing_map(routed)))
    else:
        notes.append("routing figure skipped: " + ("no probe records its NF EM and route" if results.probes else f"no RSC probe in {results.root}"))
    by_bench = rsc_probes(results)
    if by_bench:
        figures.append(("rsc_trend", "ρ̂1..3 per probe", draw_rsc_trend(by_bench)))
    else:
        notes.append("ρ̂1..3 figure skipped: " + ("no probe records all three ρ̂" if results.probes else f"no RSC probe in {results.root}"))
    fig2, fig2_notes = figure2_figures(results)
    return figures + fig2, notes + fig2_notes


def write_plots(results_dir: Path | str, out_dir: Path | None = None, formats: Sequence[str] = ("png", "pdf"), metric: str = "em") -> FigureSet:
    """Write every figure as ``out_dir/<stem>.<fmt>`` (default ``results_dir/figures``).
    ValueError for an unknown format or metric, or when ``results_dir`` is not a folder."""
    formats = check_formats(formats)
    from madara_cli.tables.lookup import TABLE_METRICS

    if metric not in TABLE_METRICS:
        raise ValueError(f"unknown metric '{metric}'; valid: {', '.join(TABLE_METRICS)}")
    if not isinstance(results_dir, Results) and not Path(results_dir).is_dir():
        raise ValueError(f"no results folder at {results_dir} (run something first, or pass --results DIR)")
    results = _results(results_dir)
    figures, notes = build_figures(results, metric)
    out = Path(out_dir) if out_dir is not None else Path(results.root) / "figures"
    paths = [p for stem, _, fig in figures for p in save_figure(fig, out, stem, formats)]
    return FigureSet(tuple(paths), tuple(notes))
