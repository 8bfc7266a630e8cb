"""``madara tables``, ``madara plot`` and ``madara report``: what a results folder
shows, written from the results on disk (nothing runs)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from madara_cli.commands.options import UserError, err, out, results_dir_of, results_option


def prefer_option():
    return typer.Option(
        None, "--prefer",
        help="KEY=VALUE (repeatable): which variant fills a table cell when several finished cells match it, e.g. "
             "backend.name=vllm, reading=authors, grid=demo-full (the table's own grid comes first; otherwise madara refuses to guess)",
    )


def _prefer_pairs(prefer: Optional[List[str]]) -> tuple[tuple[str, str], ...]:
    from madara_cli.results.stored import parse_prefer

    try:
        return parse_prefer(prefer or [])
    except ValueError as e:
        raise UserError(str(e)) from None


def strict_option():
    return typer.Option(False, "--strict", help="Exit 2, writing nothing, when several variants could fill a table cell "
                                                "(default: the cell shows '(N variants)', its table's notes list them, exit 0)")


def warn_unsettled(unsettled) -> None:
    """One warning line per table cell no rule settled, with the ``--prefer`` that picks each variant."""
    for u in unsettled:
        err.print(f"warning: {u.line()} (the tables show '({u.count} variants)')", markup=False, highlight=False, soft_wrap=True)


def refuse_variant(e) -> None:
    """A line naming the table cell and the settings its variants differ in, a line per candidate with its ``--prefer``; exit 2."""
    err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
    for line in e.candidate_lines():
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def tables(
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated tables, e.g. table2,table4 (default: all)"),
    format: str = typer.Option("md,tex,csv,long", "--format", "-f", help="Comma-separated: md, tex, csv, long (tidy numeric CSV)"),
    results: Optional[Path] = results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: RESULTS/tables)"),
    metric: str = typer.Option("em", "--metric", help="What our cells show: em (EM as the paper's authors compute it: SQuAD normalisation), em_strict (Section 5.4's literal lower-case + whitespace), f1, contains"),
    routing_nf: str = typer.Option(
        "calibration", "--routing-nf",
        help="NF EM Tables 8/9/19 route on: calibration (the probe's, as strategy=madara) or full (the NF cell)",
    ),
    prefer: Optional[List[str]] = prefer_option(),
    strict: bool = strict_option(),
) -> None:
    """Write every paper table (ours beside the paper's) from the results on disk; never runs anything.

    Result folders that cannot be read are named and left out; the other tables are
    written, and the exit status is 1 so that a script notices the gap. Where several
    variants of one table cell are on disk, the table's own grid comes first, then --prefer;
    a cell they leave unsettled shows '(N variants)' and a warning names the --prefer that
    picks each (exit 0; --strict: nothing is written, exit 2)."""
    from madara_cli.results.stored import TABLE_METRICS, AmbiguousVariant, load_results
    from madara_cli.tables.figure import write_figure2
    from madara_cli.tables.render import filled_cells, render_tables

    if metric not in TABLE_METRICS:
        raise UserError(f"unknown metric '{metric}'; valid: {', '.join(TABLE_METRICS)}")
    results_dir = results_dir_of(results)
    if not results_dir.is_dir():
        raise UserError(f"no results folder {results_dir} (run a grid first, or pass --results DIR / set MADARA_RESULTS)")
    try:
        written = render_tables(
            results_dir, out_dir or results_dir / "tables", only=only.split(",") if only else None, formats=tuple(format.split(",")), metric=metric,
            routing_nf=routing_nf, prefer=_prefer_pairs(prefer), strict=strict,
        )
    except AmbiguousVariant as e:
        refuse_variant(e)
    except ValueError as e:
        raise UserError(str(e)) from None
    paths = written.paths
    for p in paths:
        if p.suffix == ".md" and only:
            out.print(p.read_text(encoding="utf-8"), markup=False, highlight=False)
    print_filled(filled_cells(written.long, written.titles), metric)
    figs = write_figure2(results_dir, note_no_probe=False) if not only else None
    shown = f"; figure(s) {', '.join(str(p) for p in figs.paths)}" if figs and figs.paths else ""
    out.print(f"wrote {len(paths)} files under {(out_dir or results_dir / 'tables')}{shown}", soft_wrap=True)
    for note in figs.notes if figs else ():
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    warn_unsettled(written.unsettled)
    _exit_on_unreadable(load_results(results_dir).problems, "the tables were written")


def print_filled(filled, metric: str) -> None:
    """Which paper tables our cells filled and how they compare: a line per table holding ours, then those holding none."""
    from madara_cli.tables.plots import metric_name

    mine = [f for f in filled if f.ours]
    if mine:
        t = Table(title=f"paper cells filled (ours as {metric_name(metric)})", title_justify="left")
        for col in ("table", "ours", "beside paper", "mean Δ pp", "largest gap (pp)"):
            t.add_column(col, justify="left" if col in ("table", "largest gap (pp)") else "right")
        for f in mine:
            gap = "—" if f.largest is None else f"{f.largest[2]:+.1f}  {f.largest[0]} · {f.largest[1]}"
            t.add_row(f.table, str(f.ours), str(f.beside_paper), "—" if f.mean_delta is None else f"{f.mean_delta:+.1f}", gap)
        out.print(t)
        out.print("ours: numbers of ours in the table; beside paper: of those, where the paper prints a value; "
                  "Δ = ours − paper on the percent cells", style="dim", markup=False, highlight=False)
    empty = [f.table for f in filled if not f.ours]
    if empty:
        out.print(f"{len(empty)} table(s) hold no cell of ours yet: {', '.join(empty)} (madara ls grids --paper: what fills them)",
                  markup=False, highlight=False, soft_wrap=True)


def plot(
    results: Optional[Path] = results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: RESULTS/figures)"),
    format: str = typer.Option("png,pdf", "--format", "-f", help="Comma-separated: png, pdf, svg"),
    metric: str = typer.Option("em", "--metric", help="What the cells show: em (EM as the paper's authors compute it), em_strict, f1, contains"),
) -> None:
    """Draw the figures of a results folder: EM by strategy (95% CIs), cost vs EM, ρ̂1..3 per probe, Figure 2 per benchmark.

    Result folders that cannot be read are named and left out, as tables and report do:
    the other figures are drawn, and the exit status is 1."""
    from madara_cli.results.stored import load_results
    from madara_cli.tables.figure import NO_MATPLOTLIB, pyplot
    from madara_cli.tables.plots import write_plots

    results_dir = results_dir_of(results)
    if pyplot() is None:  # drawing is this verb's whole job: nothing drawn is a failure, not a note
        raise UserError(f"madara plot draws nothing here: {NO_MATPLOTLIB}")
    try:
        figs = write_plots(results_dir, out_dir, formats=format.split(","), metric=metric)
    except ValueError as e:
        raise UserError(str(e)) from None
    for p in figs.paths:
        out.print(str(p), markup=False, highlight=False, soft_wrap=True)
    for note in figs.notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    _exit_on_unreadable(load_results(results_dir).problems, "the figures were drawn")


def report(
    results: Optional[Path] = results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write index.html (default: RESULTS/report)"),
    metric: str = typer.Option("em", "--metric", help="What our cells show: em (EM as the paper's authors compute it), em_strict, f1, contains"),
    open_page: bool = typer.Option(False, "--open", help="Open the page in the web browser"),
    next_command: Optional[str] = typer.Option(
        None, "--next", help="The command to suggest last, after `madara show` (make demo suggests the larger demo grid)",
    ),
    prefer: Optional[List[str]] = prefer_option(),
    strict: bool = strict_option(),
) -> None:
    """Write one self-contained HTML page of a results folder: the Diagnose → Treat cards, figures, the routing map,
    every paper table, cell provenance; then print what the folder showed and what to type next."""
    from madara_cli.results.stored import AmbiguousVariant, load_results
    from madara_cli.tables.report import write_report
    from madara_cli.tables.story import story_lines

    results_dir = results_dir_of(results)
    chosen = _prefer_pairs(prefer)
    try:
        page = write_report(results_dir, out_dir, metric=metric, prefer=chosen, strict=strict)
    except AmbiguousVariant as e:
        refuse_variant(e)
    except ValueError as e:
        raise UserError(str(e)) from None
    for note in page.notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    warn_unsettled(page.unsettled)
    out.print(f"wrote {page.path} ({page.tables} tables, {page.figures} figures)", markup=False, highlight=False, soft_wrap=True)
    shown = load_results(results_dir, metric, prefer=chosen)
    for line in story_lines(shown, str(page.path), next_command, results_arg=None if results is None else str(results)):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if open_page:
        import webbrowser

        if not webbrowser.open(page.path.resolve().as_uri()):
            err.print(f"note: no web browser found here; open {page.path.resolve().as_uri()} yourself", markup=False, highlight=False, soft_wrap=True)
    _exit_on_unreadable(shown.problems, "the report was written")


SHOWN_PROBLEMS = 5  # unreadable folders named in full up to this many; beyond, a count and the first few


def _exit_on_unreadable(problems, done: str) -> None:
    """Exit 1 after one line naming the unreadable result folders, when there are any (a script notices the gap)."""
    if problems:
        err.print(f"error: {unreadable_folders(problems)}; {done} without them", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def unreadable_folders(problems) -> str:
    """One line naming the unreadable result folders and why (all, or a count and the first few), and what to do."""
    shown = "; ".join(f"{folder} ({why})" for folder, why in problems[:SHOWN_PROBLEMS])
    more = (f"; and {len(problems) - SHOWN_PROBLEMS} more (madara show FOLDER says what is wrong with each)"
            if len(problems) > SHOWN_PROBLEMS else "")
    return (f"{len(problems)} result folder(s) hold results that cannot be read: {shown}{more}; "
            "rerun those cells with force=true, or delete the folders")
