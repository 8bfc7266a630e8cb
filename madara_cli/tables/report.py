"""``madara report``: ``results/report/index.html``, one static page that opens from disk and
fetches nothing (PNG data URIs, inline style, no script): the Diagnose → Treat cards, the
strategies' legend, the figures with captions, every probed pair's routing, the paper tables
holding a value of ours (the rest folded) and each cell's provenance.

``templates/report.html.j2`` renders with jinja2's autoescape, so a results folder cannot inject
markup; only text built here from escaped text (:func:`inline`) or a figure's PNG is marked safe.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup, escape

from madara_cli import paper as pv
from madara_cli.results.health import MARK
from madara_cli.results.record_files import read_config_text
from madara_cli.tables.builders import TABLES
from madara_cli.tables.figure import Figure, pyplot
from madara_cli.tables.lookup import Results, load_results, probed_pairs
from madara_cli.tables.palette import strategy_colour
from madara_cli.tables.plots import build_figures, metric_name
from madara_cli.tables.render import _cells, distinct_unsettled, results_notes
from madara_cli.tables.story import Card, below_floor_text, cards, health_text, paired_text, pct, rho_text

REPORT_DIR = "report"
REPORT_FILE = "index.html"
TEMPLATE = "report.html.j2"
# Two PNG pixels per CSS pixel (sharp on dense screens); 8-point text reads at about 11 CSS px.
FIGURE_DPI = 200
FIGURE_CSS_PX_PER_INCH = 100


@dataclass(frozen=True)
class ReportResult:
    path: Path | None
    figures: int
    tables: int
    notes: tuple[str, ...]  # one line per figure skipped and why
    unsettled: tuple = ()  # Variants per table cell several variants could fill (shown "(N variants)")
    html: str = field(default="", repr=False)


def esc(value: Any) -> str:
    """Text from results as the page escapes it (quotes too, so it is safe inside attributes)."""
    return str(escape("" if value is None else str(value)))


_CODE = re.compile(r"`([^`]+)`")


def inline(text: Any) -> Markup:
    """A table note or title as HTML: escaped, Markdown `code` spans as <code>."""
    return Markup(_CODE.sub(r"<code>\1</code>", esc(text)))


@dataclass(frozen=True)
class TableView:
    """A paper table as the template draws it: string cells, title and notes."""

    name: str
    title: Markup
    columns: list[str]
    rows: list[list[str]]
    notes: list[Markup]


def table_view(df: pd.DataFrame, name: str) -> TableView:
    return TableView(name, inline(df.attrs.get("title") or name), [str(c) for c in df.columns], _cells(df),
                     [inline(n) for n in df.attrs.get("notes") or []])


def _num(x: Any, fmt: str = "{:+.2f}") -> str:
    return "—" if not isinstance(x, (int, float)) or isinstance(x, bool) else fmt.format(x)


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{100 * x:.1f}"


def _rel(path: Path | None, root: Path) -> str:
    if path is None:
        return ""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


@dataclass
class Plain:
    """A plain table for the template; ``strategies``: the columns drawn with a strategy's swatch."""

    headers: list[str]
    rows: list[list[str]]
    strategies: dict[int, list[str | None]] = field(default_factory=dict)  # column -> the strategy of each row


def routing_view(results: Results) -> Plain | None:
    """The routing decision of every probed model-task pair with its diagnostics."""
    pairs = probed_pairs(results)
    if not pairs:
        return None
    rows, routes = [], []
    for model, benchmark in pairs:
        p = results.probe(model, benchmark)
        routes.append(p.route)
        rows.append([
            pv.MODEL_LABELS.get(model, model), pv.BENCHMARK_LABELS.get(benchmark, benchmark), str(p.n), _pct(p.em_nf),
            *(_num(p.rho_at(i)) for i in range(3)), _num(p.rho_star), _num(p.rho_bar),
            pv.CLASS_LABELS.get(p.rsc_class, p.rsc_class or "—"), p.coupling or "—",
            "yes" if p.is_degenerate else "no", pv.STRATEGY_LABELS.get(p.route, p.route or "—"), p.reason or "—",
            _rel(p.path.parent if p.path else None, results.root),
        ])
    headers = ["Model", "Task", "n", "NF EM %", "ρ̂1", "ρ̂2", "ρ̂3", "ρ*", "ρ̄", "class", "coupling", "degenerate", "route", "reason", "probe"]
    route_col = headers.index("route")
    isolated = [results.probe(m, b).isolation for m, b in pairs]
    if any(iso is not None for iso in isolated):  # madara's isolation probe (README "Beyond the paper")
        headers[7:7] = ["Δ_iso (p)", "route (isolation policy)"]
        route_col += 2
        for row, iso in zip(rows, isolated):
            row[7:7] = ["—", "—"] if iso is None else [
                f"{iso.gain:+.1f} ({iso.p_value:.2g}; b/c {iso.b}/{iso.c})", pv.STRATEGY_LABELS.get(iso.route, iso.route or "—"),
            ]
    return Plain(headers, rows, {route_col: routes})


@dataclass(frozen=True)
class CardView:
    label: str
    baseline: str
    rsc_class: str
    diagnose: str
    route: str
    route_strategy: str | None
    reason: str
    treat_em: str  # "" when the routed treatment has not run
    treat: str
    command: str  # what runs it, when it has not run
    health: str = ""  # its NF or routed cell degraded (results/health.py), else ""


def card_view(card: Card) -> CardView:
    probe = card.probe
    route = pv.STRATEGY_LABELS.get(card.route or "", card.route or "no route")
    nf_n = f" on {card.nf.n} queries" if card.nf is not None else " (the probe's; no NF cell)"
    cal = "" if probe.em_nf is None else f"; {100 * probe.em_nf:.1f}% on the probe's {probe.n} calibration queries, what the route reads"
    star = "" if probe.rho_star is None else f"; ρ* {probe.rho_star:+.2f}"
    diagnose = f"{rho_text(probe)}{'' if probe.rho_at(0) is None else ' (shuffled / contradicted / random chains)'}{star}"
    if card.routed_em is None:
        treat_em, treat = "", f"the routed {route} has not run"
        command = f"madara run model={card.model} benchmark={card.benchmark} strategy=madara"
    else:
        nf = None if card.nf is None or card.nf.em is None else 100 * card.nf.em
        delta = "" if nf is None else f" ({card.routed_em - nf:+.1f} pp)"
        treat_em = f"{route} EM {pct(card.routed_em, card.routed)}"
        treat = f" vs NF {pct(nf, card.nf)}{delta} on {card.routed.n} queries ({card.routed_source}); {paired_text(card)}"
        floor = below_floor_text(card)
        if floor:
            treat += f"; {floor}"
        command = ""
    return CardView(card.label, f"No-Filter EM {pct(card.nf_em, card.nf)}{nf_n}{cal}", pv.CLASS_LABELS.get(probe.rsc_class, probe.rsc_class or "—"),
                    diagnose, route, card.route, probe.reason or "no reason recorded", treat_em, treat, command, health_text(card))


def holds_ours(df: pd.DataFrame) -> bool:
    """Whether a paper table shows a value of ours (an ``ours / paper`` cell whose ours is not ``—``); else it is folded."""
    for row in df.itertuples(index=False, name=None):
        for v in row:
            if v is None:
                continue
            text = str(v)
            if " / " in text and text.split(" / ", 1)[0].strip() not in ("", "—"):
                return True
    return False


def _engine(prov: dict[str, Any]) -> str:
    engine = prov.get("engine") or {}
    if not engine:
        return "—"
    return f"{engine.get('backend') or '?'} ({engine.get('package') or '-'} {engine.get('version') or ''})".strip()


def _versions(prov: dict[str, Any]) -> str:
    commit = prov.get("git_commit")
    parts = [f"madara {prov.get('madara_version') or '?'}"]
    if commit:
        parts.append(f"git {str(commit)[:12]}{' (dirty)' if prov.get('git_dirty') else ''}")
    if prov.get("python"):
        parts.append(f"Python {prov['python']}")
    return ", ".join(parts)


def _timing(record: Any) -> str:
    prov = record.provenance or {}
    wall = record.seconds
    parts = []
    if prov.get("started"):
        parts.append(f"{prov['started']} → {prov.get('ended') or '?'}")
    if isinstance(wall, (int, float)):
        parts.append(f"wall {wall:.1f} s")
    parts.append(f"engine {record.engine_seconds:.1f} s")
    return "; ".join(parts)


@dataclass(frozen=True)
class CellView:
    grid: str
    key: str
    model: str
    benchmark: str
    strategy: str
    n: str
    em: str
    calls: str
    overrides: str
    config: str | None
    engine: str
    versions: str
    timing: str
    health: str = "ok"  # ok | unknown | degraded
    health_reason: str = ""  # the stage and cause, when degraded


def cell_views(results: Results) -> list[CellView]:
    """Per-cell provenance: key, settings, engine, versions, timing (as the store records them)."""
    views = []
    for c in sorted(results.cells, key=lambda c: (c.grid, c.model, c.benchmark, c.strategy, c.key)):
        r = c.record
        prov = r.provenance or {}
        calls = c.calls_per_query()
        views.append(CellView(
            c.grid, c.key, c.model, c.benchmark, c.strategy, str(c.n), _pct(r.em) + (MARK if c.degraded else ""), "—" if calls is None else f"{calls:.1f}",
            " ".join(prov.get("overrides") or []) or "(no overrides)", read_config_text(c.path), _engine(prov),
            _versions(prov) if prov else "no provenance recorded", _timing(r), r.health.status,
            r.health.reason if r.health.degraded else "",
        ))
    return views


@dataclass(frozen=True)
class FigureView:
    stem: str
    title: str
    caption: str
    png: str  # base64
    width_px: int  # the CSS width it is shown at (at most the page's)
    metric: str
    strategies: tuple[str, ...]
    key: tuple[str, ...] = ()


def figure_view(figure: Figure) -> FigureView:
    width_in = float(figure.fig.get_figwidth())
    buf = io.BytesIO()
    try:
        figure.fig.savefig(buf, format="png", dpi=FIGURE_DPI)
    finally:
        pyplot().close(figure.fig)
    return FigureView(figure.stem, figure.title, figure.caption, base64.b64encode(buf.getvalue()).decode("ascii"),
                      round(width_in * FIGURE_CSS_PX_PER_INCH), figure.metric, figure.strategies, figure.key)


@dataclass(frozen=True)
class Swatch:
    strategy: str
    label: str
    colour: str


def legend(figures: Sequence[FigureView], extra: Sequence[str | None] = ()) -> list[Swatch]:
    """The one legend: every strategy the page colours, each with its one colour."""
    seen = dict.fromkeys([*(s for f in figures for s in f.strategies), *(s for s in extra if s)])
    order = {s: i for i, s in enumerate(pv.STRATEGY_LABELS)}
    return [Swatch(s, pv.STRATEGY_LABELS.get(s, s), strategy_colour(s)) for s in sorted(seen, key=lambda s: (order.get(s, 99), s))]


def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("madara_cli.tables", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals["colour"] = strategy_colour
    return env


def render_report(results: Results, metric: str = "em") -> ReportResult:
    """The page's ``html`` (no ``path`` yet), its figure and table counts, skip notes and unsettled cells."""
    from madara_cli.results.provenance import madara_version

    figures, notes = build_figures(results, metric, per_panel=True)
    figure_views = [figure_view(f) for f in figures]
    extra = results_notes(results, metric)
    shown, folded, unsettled = [], [], []
    for name, table in TABLES.items():
        df = table.builder(results)
        unsettled.append(df.attrs.get("unsettled", ()))
        if extra:
            df.attrs["notes"] = [*df.attrs.get("notes", []), *extra]
        (shown if holds_ours(df) else folded).append(table_view(df, name))
    found = cards(results)
    routing = routing_view(results)
    routes = [r for column in (routing.strategies.values() if routing else ()) for r in column]
    swatches = legend(figure_views, [*(c.route for c in found), *routes])
    template = _environment().get_template(TEMPLATE)
    unsettled = distinct_unsettled(unsettled)
    page = template.render(
        root=str(results.root), n_cells=len(results.cells), n_probes=len(results.probes), metric=metric,
        metric_name=metric_name(metric), version=madara_version(),
        skipped=[_rel(Path(s), results.root) for s in results.skipped],
        cards=[card_view(c) for c in found], figures=figure_views, notes=notes, legend=swatches,
        routing=routing, tables=shown, folded=folded, cells=cell_views(results), style=Markup(STYLE),
        unsettled=[f"{' × '.join(u.wanted)} ({u.count} variants, differing in {', '.join(u.differing)})" for u in unsettled],
    )
    return ReportResult(None, len(figures), len(shown) + len(folded), tuple(notes), tuple(unsettled), page)


STYLE = """
:root{--ink:#1a1a1a;--muted:#555;--rule:#d6dde4;--accent:#0072B2}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem clamp(.8rem,3vw,2rem);color:var(--ink);line-height:1.45}
h1{margin:.2rem 0}h2{border-bottom:2px solid var(--accent);padding-bottom:.2rem;margin-top:2.2rem}h3{margin:1.4rem 0 .4rem;font-size:1.05rem}
nav{display:flex;flex-wrap:wrap;gap:.3rem 1rem}.meta{color:var(--muted)}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.82rem;margin:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}th{background:#eef4fa;position:sticky;top:0}
tbody tr:nth-child(even){background:#fafafa}ul.notes{font-size:.78rem;color:#444;margin-top:.2rem}
pre{font-size:.72rem;max-height:24rem;overflow:auto;background:#f6f6f6;padding:.4rem}code{font-size:.85em}
.legend{display:flex;flex-wrap:wrap;gap:.3rem 1.1rem;align-items:center;margin:.6rem 0 1rem;font-size:.9rem}
.tag{white-space:nowrap}.swatch{display:inline-block;width:.9rem;height:.9rem;border:1px solid #333;border-radius:2px;vertical-align:-.12rem;margin-right:.3rem}
.figures{display:flex;flex-wrap:wrap;gap:1.6rem 2rem;align-items:flex-start}
figure{margin:0;max-width:100%;flex:0 1 auto}
figure img{display:block;width:100%;height:auto;border:1px solid var(--rule);background:#fff}
figcaption{font-size:.85rem;color:#333;margin-top:.4rem}figcaption strong{color:var(--ink)}
p.fig-note{font-size:.85rem;color:var(--muted);margin:0;flex:1 1 100%}
td[data-label="probe"],td[data-label="reason"]{overflow-wrap:anywhere;min-width:8rem}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,440px),1fr));gap:1rem}
.card{border:1px solid #bcd;border-left:4px solid var(--accent);padding:.4rem .9rem;background:#fbfdff}
.card h3{margin:.3rem 0}.card dl{display:grid;grid-template-columns:5.5rem 1fr;gap:.25rem .6rem;margin:.3rem 0;font-size:.9rem}
.card dt{font-weight:600;color:var(--accent)}.card dd{margin:0;overflow-wrap:anywhere}
details.fold{margin:.8rem 0}details.fold>summary{cursor:pointer;font-weight:600}
ul.folded{list-style:none;padding-left:0;columns:2 30rem;column-gap:2rem;font-size:.9rem}ul.folded>li{break-inside:avoid;margin:.15rem 0}
ul.folded summary{cursor:pointer}.skipped{color:var(--muted)}.degraded{color:#a03c00;font-weight:600}.unsettled{border-left:4px solid #a03c00;padding:.3rem .7rem;background:#fff8f2}
.fig-key{font-size:.9rem;margin:.4rem 0 0;padding-left:1.1rem;color:#333}
table.provenance{width:100%;table-layout:fixed}table.provenance td{overflow-wrap:anywhere}table.provenance .tag{white-space:normal}table.provenance th.wide{width:14%}
table.provenance pre{white-space:pre-wrap;overflow-wrap:anywhere}
@media (max-width:1000px){
table.stack thead{display:none}table.stack,table.stack tbody,table.stack tr{display:block;width:100%}
table.stack tr{border:1px solid #ccc;margin:.5rem 0;padding:.2rem .5rem}tbody tr:nth-child(even){background:none}
table.stack td{display:grid;grid-template-columns:minmax(6rem,32%) 1fr;gap:.6rem;border:0;border-bottom:1px solid #eee;white-space:normal!important;overflow-wrap:anywhere}
table.stack td::before{content:attr(data-label);font-weight:600;color:var(--muted)}
}
"""


def write_report(results_dir: Path | str, out_dir: Path | None = None, metric: str = "em",
                 prefer: Sequence[tuple[str, str]] = (), strict: bool = False) -> ReportResult:
    """Write ``out_dir/index.html`` (default ``results_dir/report``); ValueError for a bad metric or
    folder; ``strict``: AmbiguousVariant, nothing written, where ``prefer`` settles no variant."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"no results folder at {root} (run something first, or pass --results DIR)")
    results = load_results(root, metric, prefer=prefer, strict=strict)
    rendered = render_report(results, metric)
    out = Path(out_dir) if out_dir is not None else root / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    tmp = out / f".{REPORT_FILE}.tmp"
    tmp.write_text(rendered.html, encoding="utf-8")
    tmp.replace(path)
    return replace(rendered, path=path)
