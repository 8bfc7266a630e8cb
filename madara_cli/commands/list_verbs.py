"""``madara ls`` and ``madara show``: what a run can name, and what a finished cell or
probe holds."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from madara_cli.commands.options import UserError, out, results_dir_of, results_option, styled


def ls(
    what: Optional[str] = typer.Argument(None, help="models | backends | benchmarks | retrievers | strategies | loggers | grids"),
    paper: bool = typer.Option(False, "--paper", help="grids: only the paper grids, in the order madara reproduce runs them, one per line"),
) -> None:
    """List the configs a run can name."""
    from madara_cli.config import GROUPS, options, paper_grids, plural

    groups = {plural(g): g for g in (*GROUPS, "logger", "grid")}
    if what and what not in groups:
        raise UserError(f"unknown list '{what}'; valid: {', '.join(groups)}")
    if paper:
        if what != "grids":
            raise UserError("--paper lists grids: madara ls grids --paper")
        print("\n".join(paper_grids()))
        return
    if what == "models":  # one per line, with the chat settings every backend applies
        from madara_cli.backends.chat import ChatSettings
        from madara_cli.composition import compose

        for name in options("model"):
            m = compose([f"model={name}"]).model
            out.print(f"{name}: {m.hf_id} (chat: {ChatSettings.from_model(m).describe()})", highlight=False)
        return
    if what == "grids":  # one per line, with what each grid runs (its description:)
        from madara_cli.config import load_grid

        for name in options("grid"):
            try:
                description = str(load_grid(name).description or "").strip()
            except Exception as e:  # a broken grid file is named, not fatal to the listing  # noqa: BLE001
                description = f"(unreadable: {str(e).splitlines()[0]})"
            out.print(f"{name}: {description}" if description else name, markup=False, highlight=False, soft_wrap=True)
        return
    for name, group in groups.items():
        if what in (None, name):
            out.print(styled("[bold]{}[/bold]: {}", name, ", ".join(options(group))), markup=True)


def _reading_of(folder: Path) -> str:
    """The cell's reading (``reading=paper|authors`` and any setting off its default),
    from the config.yaml it ran with; ``paper`` where that has no reading node. The file
    is read as plain data (a results folder may come from anyone: a tag is never
    constructed); one that cannot be read says so in the row instead."""
    from madara_cli.config.identity import reading_key
    from madara_cli.errors import DataError
    from madara_cli.sidefiles import read_yaml_data

    path = folder / "config.yaml"
    try:
        config = read_yaml_data(path, "the cell's config") if path.exists() else None
    except DataError as e:
        return f"(unreadable: {e})"
    node = config.get("reading") if isinstance(config, dict) else None
    off = reading_key(node if isinstance(node, dict) else None)
    name = off.pop("name", "paper")
    return name + (f" ({', '.join(f'{k}={v}' for k, v in off.items())})" if off else "")


def _add_intervals(t: Table, record: dict) -> None:
    """Rows ``em % [95%]`` (and em_strict, contains): each 0/1 rate of a cell with its
    Wilson interval over n, the small-n rule of :mod:`madara_cli.stats`."""
    from madara_cli.stats import format_interval, rate_interval

    n = record.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or not n:
        return
    for name in ("em", "em_strict", "contains"):
        value = record.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            t.add_row(f"{name} % [95% Wilson]", format_interval(rate_interval(value, n)))


def _print_health(record) -> None:
    """A cell's health, one line under its table (yellow when degraded); nothing for a probe."""
    from madara_cli.results.health import health_line
    from madara_cli.results.outputs import CellRecord

    if isinstance(record, CellRecord):
        out.print(health_line(record), style="yellow" if record.health.degraded else None, markup=False, highlight=False, soft_wrap=True)


def show(
    cell: str = typer.Argument(..., help="A finished cell or probe folder, or its key (a unique part of it is enough)"),
    results: Optional[Path] = results_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the cell's or probe's record as JSON"),
) -> None:
    """A finished cell's metrics with its provenance: versions, commit, overrides, times, host."""
    import json

    from madara_cli.results.record_files import find_cell, flat_items, read_record

    try:
        folder = find_cell(results_dir_of(results), cell)
        fname, typed = read_record(folder)
    except ValueError as e:
        raise UserError(str(e)) from None
    from madara_cli.sidefiles import json_printable, printable

    record = typed.to_dict()
    if as_json:
        print(json_printable(json.dumps(record, indent=2, ensure_ascii=False)))
        return
    prov = typed.provenance or {}
    t = Table(title=f"{folder.name} ({fname})", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value", overflow="fold")
    skip = {"provenance", "scores", "per_query", "bootstrap"}
    for k, v in flat_items({k: v for k, v in record.items() if k not in skip}):
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values]"
        t.add_row(printable(k), "" if v is None else printable(v))
    _add_intervals(t, record)
    _print_health(typed)  # first, above the long table
    out.print(t)
    if not prov:
        out.print("[yellow]no provenance recorded[/yellow] (written by a madara older than 0.2)", markup=True)
    else:
        p = Table(title="provenance", show_header=False)
        p.add_column("key", style="bold")
        p.add_column("value", overflow="fold")
        for k in ("madara_version", "git_commit", "git_dirty", "python", "platform", "host", "started", "ended", "seconds"):
            p.add_row(k, printable(prov.get(k)))
        engine = prov.get("engine") or {}
        p.add_row("engine", printable(f"{engine.get('backend')} ({engine.get('package') or '-'} {engine.get('version') or ''})".strip()))
        p.add_row("overrides", printable(" ".join(map(str, prov.get("overrides") or [])) or "(none)"))
        p.add_row("reading", printable(_reading_of(folder)))
        p.add_row("command", printable("madara " + " ".join(map(str, prov.get("argv") or []))))
        p.add_row("packages", printable(", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items())))
        out.print(p)
    out.print(str(folder), style="dim")
