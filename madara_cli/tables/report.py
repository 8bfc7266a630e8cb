"""``madara report``: one static HTML page that shows a results folder.

``results/report/index.html`` holds, in one file that opens from disk with no server
and fetches nothing (figures are PNG data URIs, the style sheet is inline, there is no
script): first a Diagnose → Treat card per probed model-task pair
(:mod:`madara_cli.tables.story`), then the figures of :mod:`madara_cli.tables.plots`, a
routing map with the paper's ten pairs beside ours (inline SVG), the routing decision of
every probed model-task pair with its diagnostics, every paper table (those that hold no
value of ours folded in a ``<details>``) as its builder makes it
(ours beside the paper's values: the same cells as ``madara tables``), and each cell's
provenance as the store records it. Every string that comes from results (model names,
answers, overrides, configs) is HTML-escaped, so a results folder cannot inject markup.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from madara_cli import paper as pv
from madara_cli.results.record_files import read_config_text
from madara_cli.tables.builders import TABLES
from madara_cli.tables.figure import pyplot
from madara_cli.tables.lookup import Results, load_results
from madara_cli.tables.plots import build_figures
from madara_cli.tables.render import results_notes
from madara_cli.tables.story import Card, below_floor_text, cards, health_text, paired_text, pct, rho_text

REPORT_DIR = "report"
REPORT_FILE = "index.html"


@dataclass(frozen=True)
class ReportResult:
    path: Path
    figures: int
    tables: int
    notes: tuple[str, ...]  # one line per figure skipped and why


def esc(value: Any) -> str:
    """Text from results as HTML (quotes too, so it is safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


_CODE = re.compile(r"`([^`]+)`")


def inline(text: Any) -> str:
    """A table note or title as HTML: escaped, Markdown `code` spans as <code>."""
    return _CODE.sub(r"<code>\1</code>", esc(text))


def table_html(df: pd.DataFrame, table_id: str | None = None) -> str:
    """A table DataFrame (string cells, title and notes in ``df.attrs``) as an HTML
    ``<table>`` with its notes under it; the HTML sibling of ``render.to_markdown``."""
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc('' if v is None else v)}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False, name=None)
    )
    id_attr = f' id="{esc(table_id)}"' if table_id else ""
    parts = [f'<div class="table"{id_attr}>']
    if df.attrs.get("title"):
        parts.append(f"<h3>{inline(df.attrs['title'])}</h3>")
    parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')
    notes = df.attrs.get("notes") or []
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{inline(n)}</li>" for n in notes) + "</ul>")
    parts.append("</div>")
    return "\n".join(parts)


def _rows_html(headers: Sequence[str], rows: Iterable[Sequence[Any]], raw: Sequence[bool] = ()) -> str:
    """A plain table; cells are escaped unless their column is marked raw (already HTML)."""
    raw = tuple(raw) + (False,) * (len(headers) - len(raw))
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{v if r else esc(v)}</td>" for v, r in zip(row, raw)) + "</tr>" for row in rows
    )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


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


def routing_html(results: Results) -> str:
    """The routing decision of every probed model-task pair with its diagnostics."""
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    pairs = sorted({(p.model, p.benchmark) for p in results.probes}, key=lambda mb: (order.get(mb[0], 99), mb[0], mb[1]))
    if not pairs:
        return "<p>No RSC probe in this folder (<code>madara probe --model M --benchmark B</code> writes one).</p>"
    rows = []
    for model, benchmark in pairs:
        p = results.probe(model, benchmark)
        rows.append([
            pv.MODEL_LABELS.get(model, model), pv.BENCHMARK_LABELS.get(benchmark, benchmark), p.n, _pct(p.em_nf),
            *(_num(p.rho_at(i)) for i in range(3)), _num(p.rho_star), _num(p.rho_bar),
            pv.CLASS_LABELS.get(p.rsc_class, p.rsc_class or "—"), p.coupling or "—",
            "yes" if p.is_degenerate else "no", pv.STRATEGY_LABELS.get(p.route, p.route or "—"), p.reason or "—",
            _rel(p.path.parent if p.path else None, results.root),
        ])
    headers = ["Model", "Task", "n", "NF EM %", "ρ̂1", "ρ̂2", "ρ̂3", "ρ*", "ρ̄", "class", "coupling", "degenerate", "route", "reason", "probe"]
    isolated = [results.probe(m, b).isolation for m, b in pairs]
    if any(iso is not None for iso in isolated):  # madara's isolation probe (README "Beyond the paper")
        headers[7:7] = ["Δ_iso (p)", "route (isolation policy)"]
        for row, iso in zip(rows, isolated):
            row[7:7] = ["—", "—"] if iso is None else [
                f"{iso.gain:+.1f} ({iso.p_value:.2g}; b/c {iso.b}/{iso.c})", pv.STRATEGY_LABELS.get(iso.route, iso.route or "—"),
            ]
    return _rows_html(headers, rows)


def _card_html(card: Card) -> str:
    probe = card.probe
    route = pv.STRATEGY_LABELS.get(card.route or "", card.route or "no route")
    nf_n = f" on {card.nf.n} queries" if card.nf is not None else " (the probe's; no NF cell)"
    cal = "" if probe.em_nf is None else f"; {100 * probe.em_nf:.1f}% on the probe's {probe.n} calibration queries, what the route reads"
    star = "" if probe.rho_star is None else f"; ρ* {probe.rho_star:+.2f}"
    if card.routed_em is None:
        treat = f"the routed {esc(route)} has not run (<code>madara run model={esc(card.model)} benchmark={esc(card.benchmark)} strategy=madara</code>)"
    else:
        nf = None if card.nf is None or card.nf.em is None else 100 * card.nf.em
        delta = "" if nf is None else f" ({card.routed_em - nf:+.1f} pp)"
        treat = (f"<strong>{esc(route)} EM {esc(pct(card.routed_em))}</strong> vs NF {esc(pct(nf))}{esc(delta)} on {esc(card.routed.n)} queries "
                 f"({esc(card.routed_source)}); {esc(paired_text(card))}")
        floor = below_floor_text(card)
        if floor:
            treat += f"; {esc(floor)}"
    return (
        f'<article class="card"><h3>{esc(card.label)}</h3><dl>'
        f"<dt>Baseline</dt><dd>No-Filter EM {esc(pct(card.nf_em))}{esc(nf_n)}{esc(cal)}</dd>"
        f"<dt>Diagnose</dt><dd>RSC class <strong>{esc(pv.CLASS_LABELS.get(probe.rsc_class, probe.rsc_class or '—'))}</strong>: "
        f"{esc(rho_text(probe))}{'' if probe.rho_at(0) is None else ' (shuffled / contradicted / random chains)'}{esc(star)}</dd>"
        f"<dt>Route</dt><dd><strong>{esc(route)}</strong>: {esc(probe.reason or 'no reason recorded')}</dd>"
        f"<dt>Treat</dt><dd>{treat}</dd>{_health_html(card)}</dl></article>"
    )


def _health_html(card: Card) -> str:
    """A Health row on a card whose NF or routed cell is degraded (else nothing)."""
    text = health_text(card)
    return f'<dt>Health</dt><dd class="degraded">{esc(text)}</dd>' if text else ""


def story_html(results: Results) -> str:
    """The Diagnose → Treat card of every probed model × benchmark."""
    found = cards(results)
    if not found:
        return "<p>No RSC probe in this folder (<code>madara probe --model M --benchmark B</code>, or a <code>strategy=madara</code> cell, writes one).</p>"
    return '<div class="cards">' + "".join(_card_html(c) for c in found) + "</div>"


# The routing map's plot area (SVG user units): NF EM 0-100 % across, ρ̂1 -1..1 up.
_MAP_W, _MAP_H, _MAP_L, _MAP_B, _MAP_T, _MAP_R = 700, 360, 46, 36, 14, 100


def _map_xy(nf: float, rho1: float | None) -> tuple[float, float]:
    x = _MAP_L + (_MAP_W - _MAP_L - _MAP_R) * min(max(nf, 0.0), 100.0) / 100
    y_val = -1.2 if rho1 is None else min(max(rho1, -1.0), 1.0)  # no ρ̂1: a strip under the axis
    y = _MAP_T + (_MAP_H - _MAP_T - _MAP_B) * (1.0 - (y_val + 1.2) / 2.2)
    return round(x, 1), round(y, 1)


def routing_map_html(results: Results) -> str:
    """The paper's ten model-task pairs (Table 2: NF EM, ρ̂1, route) and ours on one
    routing map, as inline SVG (no script), with the same points as a table."""
    points = []  # (ours?, label, nf %, rho1, class, route)
    for model, bench in pv.ROUTING_PAIRS:
        cls, rho1, nf, route = (pv.lookup(pv.TABLE2, model, bench, c) for c in ("rsc_class", "rho1", "nf", "strategy"))
        points.append((False, f"{pv.MODEL_LABELS.get(model, model)} · {pv.BENCHMARK_LABELS.get(bench, bench)}", nf, rho1, cls, route))
    for card in cards(results):
        p = card.probe
        if p.em_nf is not None:
            points.append((True, card.label.replace(" × ", " · "), 100 * p.em_nf, p.rho_at(0), p.rsc_class, card.route))
    x0, _ = _map_xy(pv.TAU_NF, 0)
    _, y0 = _map_xy(0, pv.TAU_RHO1)
    xl, yb = _map_xy(0, -1.0)
    xr, yt = _map_xy(100, 1.0)
    parts = [
        f'<svg class="map" viewBox="0 0 {_MAP_W} {_MAP_H}" width="{_MAP_W}" height="{_MAP_H}" role="img" '
        f'aria-label="Routing map: NF EM against rho-hat-1, the paper\'s pairs hollow, ours filled">',
        f'<rect x="{xl}" y="{yt}" width="{xr - xl}" height="{yb - yt}" fill="#fcfcfc" stroke="#999"/>',
        f'<line x1="{x0}" y1="{yt}" x2="{x0}" y2="{_MAP_H - _MAP_B + 8}" stroke="#555" stroke-dasharray="4 3"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{xr}" y2="{y0}" stroke="#555" stroke-dasharray="4 3"/>',
        f'<text x="{x0 + 3}" y="{yt + 11}" class="ax">τ_NF {pv.TAU_NF:g}%</text>',
        f'<text x="{xr - 3}" y="{y0 - 4}" class="ax" text-anchor="end">ρ̂1 {pv.TAU_RHO1:g}</text>',
        f'<text x="{(xl + x0) / 2:.1f}" y="{yb - 8}" class="zone" text-anchor="middle">→ PDE (weak baseline)</text>',
        f'<text x="{(x0 + xr) / 2:.1f}" y="{yb - 8}" class="zone" text-anchor="middle">→ SDA if stochastic; else ATF at ρ̂1 ≥ {pv.TAU_RHO1:g}, CoT below</text>',
        f'<text x="{(xl + xr) / 2:.1f}" y="{_MAP_H - 4}" class="ax" text-anchor="middle">No-Filter EM % (ours: the probe\'s calibration NF)</text>',
        f'<text x="12" y="{(yt + yb) / 2:.1f}" class="ax" text-anchor="middle" transform="rotate(-90 12 {(yt + yb) / 2:.1f})">ρ̂1 (shuffled chains)</text>',
    ]
    for tick in (0, 25, 50, 75, 100):
        x, _ = _map_xy(tick, 0)
        parts.append(f'<text x="{x}" y="{yb + 13}" class="ax" text-anchor="middle">{tick}</text>')
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        _, y = _map_xy(0, tick)
        parts.append(f'<text x="{xl - 4}" y="{y + 3}" class="ax" text-anchor="end">{tick:+.1f}</text>')
    rows = []
    for number, (ours, label, nf, rho1, cls, route) in enumerate(points, 1):
        x, y = _map_xy(nf, rho1)
        colour = _ROUTE_COLOURS.get(route or "", "#777")
        fill = colour if ours else "white"
        title = f"{'ours' if ours else 'paper'}: {label}, NF {nf:.1f}%, ρ̂1 {_num(rho1)}, {pv.CLASS_LABELS.get(cls, cls or '—')} → {pv.STRATEGY_LABELS.get(route or '', route or '—')}"
        shape = (f'<rect x="{x - 5}" y="{y - 5}" width="10" height="10"' if cls == "stochastic" else f'<circle cx="{x}" cy="{y}" r="5"')
        parts.append(f'{shape} fill="{fill}" stroke="{colour}" stroke-width="2"><title>{esc(title)}</title>'
                     f'{"</rect>" if cls == "stochastic" else "</circle>"}')
        # The paper's points by number (its FEVER pairs sit within a few points of each
        # other), ours by name; the table under the map names every number.
        parts.append(f'<text x="{x + 7}" y="{y - 5}" class="pt{" ours" if ours else ""}">{esc(label if ours else number)}</text>')
        rows.append([number, "ours" if ours else "paper (Table 2)", label, f"{nf:.1f}", _num(rho1), pv.CLASS_LABELS.get(cls, cls or "—"),
                     pv.STRATEGY_LABELS.get(route or "", route or "—")])
    legend = " ".join(f'<span style="color:{c}">■ {esc(pv.STRATEGY_LABELS.get(r, r))}</span>' for r, c in _ROUTE_COLOURS.items())
    parts.append("</svg>")
    table = _rows_html(["#", "source", "pair", "NF EM %", "ρ̂1", "class", "route"], rows)
    return (f'<div class="mapbox">{"".join(parts)}<p class="meta">Hollow: the paper\'s ten pairs; filled: ours. '
            f"Square: stochastic; circle: quality-ordered or degenerate. Colour is the route: {legend}</p>"
            f"{table}</div>")


_ROUTE_COLOURS = {"pde": "#D55E00", "sda": "#0072B2", "atf": "#009E73", "cot": "#CC79A7", "three_agent": "#777777"}


def holds_ours(df: pd.DataFrame) -> bool:
    """Whether a paper table shows any value of ours: a cell ``ours / paper`` whose ours
    is not ``—`` (a table of only the paper's values is folded away on the page)."""
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


def cells_html(results: Results) -> str:
    """Per-cell provenance: key, settings, engine, versions, timing (as the store records them)."""
    if not results.cells:
        return "<p>No finished cell in this folder (<code>madara run ...</code> writes them).</p>"
    cells = sorted(results.cells, key=lambda c: (c.grid, c.model, c.benchmark, c.strategy, c.key))
    rows = []
    for c in cells:
        r = c.record
        prov = r.provenance or {}
        calls = c.calls_per_query()
        config = read_config_text(c.path)
        settings = esc(" ".join(prov.get("overrides") or []) or "(no overrides)")
        if config:
            settings += f"<details><summary>config.yaml</summary><pre>{esc(config)}</pre></details>"
        rows.append([
            esc(c.grid), f"<code>{esc(c.key)}</code>", esc(c.model), esc(c.benchmark), esc(c.strategy), esc(c.n), esc(_pct(r.em)),
            esc("—" if calls is None else f"{calls:.1f}"), _cell_health_html(r), settings, esc(_engine(prov)),
            esc(_versions(prov) if prov else "no provenance recorded"), esc(_timing(r)),
        ])
    headers = ["grid", "key", "model", "benchmark", "strategy", "n", "EM %", "calls/query", "health", "settings", "engine", "versions", "timing"]
    return _rows_html(headers, rows, raw=(True,) * len(headers))


def _cell_health_html(record: Any) -> str:
    """A cell's health status; when degraded, the stage and cause beside it."""
    health = record.health
    if not health.degraded:
        return esc(health.status)
    return f'<span class="degraded">degraded</span>: {esc(health.reason)}'


def _figure_png(fig: Any) -> str:
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:1rem 2rem;color:#1a1a1a;line-height:1.4}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #0072B2;padding-bottom:.2rem;margin-top:2.2rem}h3{margin:1.6rem 0 .4rem;font-size:1.05rem}
nav a{margin-right:1rem}.meta{color:#555}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.82rem;margin:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}th{background:#eef4fa;position:sticky;top:0}
tbody tr:nth-child(even){background:#fafafa}ul.notes{font-size:.78rem;color:#444;margin-top:.2rem}
figure{margin:1rem 0;display:inline-block;vertical-align:top;max-width:100%}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.85rem;color:#333}pre{font-size:.72rem;max-height:24rem;overflow:auto;background:#f6f6f6;padding:.4rem}
code{font-size:.85em}.skipped{color:#8a4b00}.degraded{color:#a03c00;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:1rem}.card{border:1px solid #bcd;border-left:4px solid #0072B2;padding:.4rem .9rem;max-width:40rem;background:#fbfdff}
.card h3{margin:.3rem 0}.card dl{display:grid;grid-template-columns:6rem 1fr;gap:.2rem .6rem;margin:.3rem 0;font-size:.9rem}.card dt{font-weight:600;color:#0072B2}.card dd{margin:0}
details.fold>summary{cursor:pointer;margin:.5rem 0;font-weight:600}svg.map .ax{font-size:10px;fill:#555}svg.map .zone{font-size:10px;fill:#999}
svg.map .pt{font-size:9px;fill:#555}svg.map .pt.ours{font-size:9px;fill:#000;font-weight:600}.mapbox{max-width:720px}
"""


def render_report(results: Results, metric: str = "em") -> tuple[str, int, int, tuple[str, ...]]:
    """The page's HTML, the number of figures and tables in it, and the skip notes."""
    from madara_cli.results.provenance import madara_version

    figures, notes = build_figures(results, metric)
    figs_html = "\n".join(
        f'<figure><img alt="{esc(title)}" src="data:image/png;base64,{_figure_png(fig)}"><figcaption>{esc(title)}</figcaption></figure>'
        for _, title, fig in figures
    )
    if notes:
        figs_html += '\n<ul class="skipped">' + "".join(f"<li>{inline(n)}</li>" for n in notes) + "</ul>"
    extra = results_notes(results, metric)
    tables, folded = [], []
    for name, table in TABLES.items():
        df = table.builder(results)
        if extra:
            df.attrs["notes"] = [*df.attrs.get("notes", []), *extra]
        if holds_ours(df):
            tables.append(table_html(df, name))
        else:  # only the paper's values: folded, its title as the summary
            folded.append(name)
            title = inline(df.attrs.get("title") or name)
            tables.append(f'<details class="fold"><summary>{title} <span class="meta">(no cell of ours yet)</span></summary>\n'
                          f"{table_html(df, name)}\n</details>")
    toc = " ".join(f'<a href="#{esc(name)}">{esc(name.removeprefix("table").lstrip("_") or name)}</a>' for name in TABLES if name not in folded)
    if folded:
        toc += f"; folded (no cell of ours yet): {len(folded)}"
    skipped = ""
    if results.skipped:
        skipped = (
            '<p class="skipped">Left out (unreadable or incomplete records): '
            + ", ".join(f"<code>{esc(_rel(Path(s), results.root))}</code>" for s in results.skipped)
            + "</p>"
        )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>madara report: {esc(results.root)}</title>
<style>{_STYLE}</style>
</head>
<body>
<header>
<h1>madara report</h1>
<p class="meta">Results folder <code>{esc(results.root)}</code>: {len(results.cells)} finished cell(s), {len(results.probes)} probe(s);
ours show {esc(metric)}; written by madara {esc(madara_version())}.</p>
<nav><a href="#story">Diagnose → Treat</a><a href="#figures">Figures</a><a href="#map">Routing map</a><a href="#routing">Routing decisions</a><a href="#tables">Paper tables</a><a href="#cells">Cells and provenance</a></nav>
{skipped}
</header>
<section id="story">
<h2>Diagnose → Treat</h2>
<p class="meta">Per probed model × benchmark: the No-Filter baseline, what the RSC probe measured, the treatment MADARA routes to and why, and the routed EM beside NF with McNemar's exact test on the queries both answered.</p>
{story_html(results)}
</section>
<section id="figures">
<h2>Figures</h2>
{figs_html or "<p>No figure.</p>"}
</section>
<section id="map">
<h2>Routing map</h2>
<p class="meta">Where each pair sits against the router's thresholds: the paper's ten model-task pairs (Table 2) beside ours.</p>
{routing_map_html(results)}
</section>
<section id="routing">
<h2>Routing decisions</h2>
<p class="meta">One row per probed model-task pair: the No-Filter EM and RSC diagnostics of its probe and the treatment MADARA routes it to, with the reason.</p>
{routing_html(results)}
</section>
<section id="tables">
<h2>Paper tables</h2>
<p class="meta">Each cell is <em>ours / paper (Δ)</em>, as in <code>madara tables</code>; — where this folder has no cell for it. Tables: {toc}</p>
{chr(10).join(tables)}
</section>
<section id="cells">
<h2>Cells and provenance</h2>
{cells_html(results)}
</section>
</body>
</html>
"""
    return page, len(figures), len(tables), tuple(notes)


def write_report(results_dir: Path | str, out_dir: Path | None = None, metric: str = "em",
                 prefer: Sequence[tuple[str, str]] = ()) -> ReportResult:
    """Write ``out_dir/index.html`` (default ``results_dir/report``). ValueError for an
    unknown metric, or when ``results_dir`` is not a folder;
    :class:`~madara_cli.results.stored.AmbiguousVariant` (nothing written) when several
    variants could fill a table cell and ``prefer`` picks none."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"no results folder at {root} (run something first, or pass --results DIR)")
    results = load_results(root, metric, prefer=prefer)
    page, n_figures, n_tables, notes = render_report(results, metric)
    out = Path(out_dir) if out_dir is not None else root / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    tmp = out / f".{REPORT_FILE}.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return ReportResult(path, n_figures, n_tables, notes)
