"""``madara ls`` and ``madara show``: what a run can name, and what a finished cell or
probe holds."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from madara_cli.commands.options import UserError, out, results_dir_of, results_option, styled


def ls(
    what: Optional[str] = typer.Argument(None, help="models | backends | benchmarks | retrievers | strategies | loggers | grids | "
                                                    "cells (the finished cells and probes of --results, as a leaderboard)"),
    filters: Optional[List[str]] = typer.Argument(None, help="cells: KEY=VALUE to keep, e.g. model=smollm2-135m strategy=nf health=degraded"),
    paper: bool = typer.Option(False, "--paper", help="grids: only the paper grids, in the order madara reproduce runs them, one per line"),
    sort: Optional[str] = typer.Option(None, "--sort", help="cells: a column to sort by (em, f1, calls, time, n, model, ...); numbers largest first"),
    results: Optional[Path] = results_option(),
    as_json: bool = typer.Option(False, "--json", help="cells: the rows as JSON (intervals, health, request counts, key, folder)"),
) -> None:
    """List the configs a run can name, or (ls cells) the finished cells and probes."""
    from madara_cli.config import GROUPS, options, paper_grids, plural

    groups = {plural(g): g for g in (*GROUPS, "logger", "grid")}
    if what == "cells":
        return list_cells(results_dir_of(results), filters or [], sort, as_json)
    if what and what not in groups:
        raise UserError(f"unknown list '{what}'; valid: {', '.join([*groups, 'cells'])}")
    if filters:
        raise UserError(f"KEY=VALUE filters are for madara ls cells, not ls {what or ''}".rstrip())
    if paper:
        if what != "grids":
            raise UserError("--paper lists grids: madara ls grids --paper")
        print("\n".join(paper_grids()))
        return
    if what in ("models", "benchmarks", "strategies"):  # one per line: what it is, and whether it runs here offline
        for name in options(groups[what]):
            try:
                line = DESCRIBE[what](name)
            except Exception as e:  # a broken config is named, not fatal to the listing  # noqa: BLE001
                line = f"(unreadable: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
            out.print(f"{name}: {line}", markup=False, highlight=False, soft_wrap=True)
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


# --- madara ls cells: the finished cells and probes as a leaderboard

# Columns of the leaderboard that sort by a number (largest first): the row's field each reads.
SORT_FIELDS = {"em": "em", "f1": "f1", "contains": "contains", "n": "n", "calls": "requests", "time": "wall_seconds", "engine": "engine_seconds"}


def list_cells(root: Path, filters: list[str], sort: str | None, as_json: bool) -> None:
    """``madara ls cells``: a row per finished cell and probe under ``root``, kept by ``KEY=VALUE`` filters, sorted by ``sort``."""
    import json

    from madara_cli.results.stored import load_results
    from madara_cli.results.summary import cell_result, cells_table, probe_result

    if not root.is_dir():
        raise UserError(f"no results folder {root} (run something first, or pass --results DIR / set MADARA_RESULTS)")
    loaded = load_results(root)
    rows = [cell_result(c.record, c.path) for c in loaded.cells] + [probe_result(p) for p in loaded.probes]
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"filter '{item}': expected KEY=VALUE, e.g. model=smollm2-135m")
        if rows and key not in rows[0]:
            raise UserError(f"filter '{item}': no column '{key}'; valid: {', '.join(k for k in rows[0] if not k.endswith('ci95'))}")
        rows = [r for r in rows if str(r.get(key)) == value]
    if sort:
        if sort not in SORT_FIELDS and (not rows or sort not in rows[0]):
            raise UserError(f"--sort {sort}: valid: {', '.join([*SORT_FIELDS, 'model', 'benchmark', 'strategy', 'grid', 'health'])}")
        field = SORT_FIELDS.get(sort, sort)
        numeric = sort in SORT_FIELDS
        rows.sort(key=lambda r: (r.get(field) is None, -(r.get(field) or 0) if numeric else str(r.get(field))))
    else:
        rows.sort(key=lambda r: (r["model"], r["benchmark"], r["kind"] == "cell", r["strategy"], r["grid"]))
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        out.print(f"no finished cell or probe under {root}{' matches ' + ' '.join(filters) if filters else ''}", markup=False, highlight=False)
        return
    out.print(cells_table(rows))
    out.print(f"EM, F1 in % [95%: Wilson; F1: bootstrap from n=10]; a probe's EM: NF on its calibration queries; {CALLS_TIME}. "
              "madara show KEY (a unique part) opens one; --json: exact intervals, keys, folders.", style="dim", markup=False, highlight=False)


CALLS_TIME = "calls: requests per query (cached or not); time: the cell's wall time (madara show: tokens, engine seconds)"


# --- madara ls models | benchmarks | strategies: a line each, with offline availability


DESCRIPTION_CHARS = 110
DESCRIPTION_READ = 8192  # bytes of a config file read for its opening comment


def description(group: str, name: str) -> str:
    """The first sentence of the comment opening ``configs/<group>/<name>.yaml`` (where each shipped
    option says what it is), cut at a word near :data:`DESCRIPTION_CHARS`; empty without one."""
    import re

    from madara_cli.config.folders import find_config

    path = find_config(group, name)
    head = b""
    if path:
        with path.open("rb") as f:  # the opening comment: the first lines, never a whole large file
            head = f.read(DESCRIPTION_READ)
    lines = []
    for line in head.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(x for x in lines if x)
    # A sentence ends at ". " before a capital (not after "et al.") or at "; ".
    first = re.split(r"(?<!\bal)\.\s+(?=[A-Z])|;\s", text, maxsplit=1)[0].rstrip(".;")
    if len(first) > DESCRIPTION_CHARS:
        first = first[:DESCRIPTION_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    return first


def _hub_has(kind: str, hf_id: str | None) -> bool:
    """Whether the local Hugging Face cache holds ``hf_id`` (``kind``: models | datasets), read from disk only."""
    from madara_cli.core.hub import cache_folder as hub_cache

    if not hf_id or hf_id.count("/") != 1:
        return False
    folder = hub_cache() / f"{kind}--{hf_id.replace('/', '--')}" / "snapshots"
    if folder.is_dir() and any(folder.iterdir()):
        return True
    if kind == "datasets":  # the datasets library's own cache: <org>___<name>
        import os

        root = Path(os.environ.get("HF_DATASETS_CACHE") or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "datasets")
        return (root / hf_id.replace("/", "___")).is_dir()
    return False


def model_line(name: str) -> str:
    """A model: hub id and size, whether each kind of engine finds its weights here offline, its chat settings."""
    from madara_cli.backends.chat import ChatSettings
    from madara_cli.backends.weights import resolve_gguf
    from madara_cli.composition import compose
    from madara_cli.core.errors import BackendError

    m = compose([f"model={name}"]).model
    size = f", {m.params_b:g}B" if m.get("params_b") else ""
    gguf = False
    if m.get("gguf"):
        try:
            resolve_gguf(str(m.gguf))
            gguf = True
        except BackendError:
            pass
    llama = "llama.cpp: GGUF here" if gguf else ("llama.cpp: GGUF missing" if m.get("gguf") else "llama.cpp: no GGUF (model.gguf=FILE)")
    hf = gguf and m.get("hf_source") == "gguf" or _hub_has("models", m.get("hf_id"))
    weights = "vLLM/transformers: weights here" if hf else "vLLM/transformers: not downloaded (needs the hub)"
    offline = "offline: yes" if gguf or hf else "offline: no"
    return f"{m.hf_id}{size}; {offline} ({llama}; {weights}); chat: {ChatSettings.from_model(m).describe()}"


def benchmark_line(name: str) -> str:
    """A benchmark: what it is, and whether its questions (and documents) are here offline."""
    from madara_cli.composition.plugins import ensure_loaded
    from madara_cli.config.folders import find_config, read_yaml
    from madara_cli.plugins.catalog import CATALOG

    ensure_loaded()
    node = read_yaml(find_config("benchmark", name)) or {}
    if (loader := CATALOG.find("loader", str(node.get("loader")))) is not None and loader.offline:
        where = f"offline: yes ({loader.offline})"
    elif node.get("path"):
        where = f"offline: {'yes' if Path(str(node['path'])).expanduser().is_file() else 'no'} (benchmark.path {node['path']})"
    elif node.get("hf_id"):
        where = "offline: yes (in the hub cache)" if _hub_has("datasets", node["hf_id"]) else f"offline: no ({node['hf_id']} not downloaded; or benchmark.path=FILE)"
    else:
        where = "offline: needs benchmark.path=FILE"
    if "corpus" in node and not node.get("corpus"):
        where += "; its documents need benchmark.corpus=FILE or retriever.index=DIR"
    return _joined(description("benchmark", name), where)


def strategy_line(name: str) -> str:
    """A strategy: what it does, and whether it needs more than the model (a reranker from the hub)."""
    from madara_cli.config.folders import find_config, read_yaml

    node = read_yaml(find_config("strategy", name)) or {}
    extra = node.get("cross_encoder")
    if extra:
        where = f"offline: {'yes' if _hub_has('models', str(extra)) else 'no'} (its reranker {extra})"
    else:
        where = "offline: yes (needs only the model)"
    return _joined(description("strategy", name), where)


def _joined(what: str, where: str) -> str:
    return f"{what} — {where}" if what else where


DESCRIBE = {"models": model_line, "benchmarks": benchmark_line, "strategies": strategy_line}


def _reading_of(folder: Path) -> str:
    """The cell's reading (``reading=paper|authors`` and any setting off its default) from the
    config.yaml it ran with, ``paper`` without a reading node; read as plain data (a results
    folder may come from anyone: a tag is never constructed), an unreadable one said in the row."""
    from madara_cli.config.keys import reading_key
    from madara_cli.core.errors import DataError
    from madara_cli.core.sidefiles import read_yaml_data

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
    """Rows ``em % [95%]`` (em_strict, contains): each 0/1 rate with its Wilson interval over n (:mod:`madara_cli.core.stats`)."""
    from madara_cli.core.stats import format_interval, rate_interval

    n = record.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or not n:
        return
    for name in ("em", "em_strict", "contains"):
        value = record.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            t.add_row(f"{name} % [95% Wilson]", format_interval(rate_interval(value, n)))


def _rate(value: float | None, n: int) -> str:
    """A 0/1 rate in % with its Wilson 95% interval over n (the small-n rule of :mod:`madara_cli.core.stats`)."""
    from madara_cli.core.stats import format_interval, rate_interval

    return "—" if value is None else f"{format_interval(rate_interval(value, n))}  (Wilson 95%)"


def _mean(folder: Path, name: str, value: float | None) -> str:
    """A graded metric (F1) in % with the rule's interval from the per-query values on disk."""
    from madara_cli.core.stats import MIN_N_FOR_BOOTSTRAP, format_interval, mean_interval
    from madara_cli.results.record_files import read_predictions

    if value is None:
        return "—"
    try:
        values = [float(r[name]) for r in read_predictions(folder) if isinstance(r.get(name), (int, float))]
    except (OSError, ValueError):
        values = []
    if not values:
        return f"{100 * value:.1f}"
    iv = mean_interval(values)
    how = {"wilson": "Wilson 95%", "bootstrap": "bootstrap 95%"}.get(iv.method, f"no interval below n={MIN_N_FOR_BOOTSTRAP}")
    return f"{format_interval(iv)}  ({how})"


def _cost(acc: dict, n: int | None, wall: float | None, engine: float) -> str:
    from madara_cli.results.summary import request_counts

    counts = request_counts(acc)
    parts = []
    if counts is not None:
        per = f", {counts['requests'] / n:.1f} per query" if n else ""
        parts.append(f"{counts['requests']:,} requests{per} = {counts['sent']:,} sent to the engine + {counts['cached']:,} from the cache"
                      f" + {counts['repeated']:,} repeated in a batch (sent once)")
    if acc.get("tokens_in") is not None:
        parts.append(f"tokens {acc.get('tokens_in', 0):,} in / {acc.get('tokens_out', 0):,} out")
    if isinstance(wall, (int, float)):
        parts.append(f"wall {wall:.1f} s")
    parts.append(f"engine {engine:.1f} s (summed over requests)")
    return "; ".join(parts)


def health_rows(record) -> list[tuple[str, str]]:
    """What a cell's numbers rest on (results/health.py): its status and, per scoring stage, the
    scores imputed, cut at the token budget or missing an id."""
    from madara_cli.results.health import health_line
    from madara_cli.results.outputs import CellRecord

    if not isinstance(record, CellRecord):
        return []
    return [("health", health_line(record).removeprefix("health: "))]


def cell_summary_rows(folder: Path, record) -> list[tuple[str, str]]:
    """What ``madara show`` prints first for a finished cell, a (label, text) pair per line: EM with its
    95% interval, score health, route and reason (a ``madara`` cell), cost; then F1/contains, what ran, its key."""
    k = f", k={record.k}" if record.k is not None else ""
    limit = f", limit {record.limit}" if record.limit is not None else ""
    rows = [("EM %", _rate(record.em, record.n)), *health_rows(record)]
    routed = record.madara
    if routed:
        rsc = routed.get("rsc_class") or "—"
        nf = routed.get("em_nf_calibration")
        nf_text = "" if nf is None else f", calibration NF {100 * nf:.1f}%"
        rows.append(("route", f"{routed.get('route') or '—'}: {routed.get('reason') or 'no reason recorded'}"))
        rows.append(("probe", f"{routed.get('probe') or '—'} (RSC class {rsc}{nf_text}{', reused' if routed.get('probe_reused') else ''})"))
    return rows + [
        ("cost", _cost(record.accounting or {}, record.n, record.seconds, record.engine_seconds)),
        ("F1 %", _mean(folder, "f1", record.f1)),
        ("contains %", _rate(record.contains, record.n)),
        ("cell", f"{record.model} on {record.benchmark}: {record.strategy} (retriever {record.retriever}{k})"),
        ("ran", f"n={record.n} queries{limit}, seed {record.seed}, grid {record.grid}"),
        _folder_row(folder),
    ]


def _folder_row(folder: Path) -> tuple[str, str]:
    """Where the record lives, as ``madara show`` takes it back: ``<grid>/<key>`` under its results folder."""
    return "folder", f"{folder.parent.name}/{folder.name} under {folder.parent.parent}"


def probe_summary_rows(record) -> list[tuple[str, str]]:
    """What ``madara show`` prints first for an RSC probe: the pair, NF, ρ̂, class, route and reason, cost."""
    def f(x, fmt="{:+.2f}"):
        return "—" if x is None else fmt.format(x)

    timing = record.timing or {}
    wall = (record.provenance or {}).get("seconds", timing.get("wall_seconds"))
    return [
        ("NF EM %", _rate(record.em_nf, record.n)),
        ("route", f"{record.route or '—'}: {record.reason or 'no reason recorded'}"),
        ("class", f"{record.rsc_class or '—'} (ρ* {f(record.rho_star)}, coupling {record.coupling or '—'})"),
        ("ρ̂1/ρ̂2/ρ̂3", " / ".join(f(record.rho_at(i)) for i in range(3)) + "  (shuffled / contradicted / random chains)"),
        ("cost", _cost(record.accounting or {}, None, wall, float(timing.get("engine_seconds", 0) or 0))),
        ("probe", f"{record.model} on {record.benchmark}, n={record.n} calibration queries"),
    ]


def print_summary(rows: list[tuple[str, str]], title: str) -> None:
    """Aligned ``label  text`` lines, wrapped at the terminal's width under the text (a key or path too long runs on)."""
    import textwrap

    from rich.cells import cell_len

    width = max(cell_len(label) for label, _ in rows)
    indent = " " * (width + 4)
    out.print(title, style="bold", markup=False, highlight=False, soft_wrap=True)
    for label, text in rows:
        lines = textwrap.wrap(text, max(out.width - len(indent), 20), break_long_words=False, break_on_hyphens=False) or [""]
        out.print(f"  {label}{' ' * (width - cell_len(label))}  {lines[0]}", markup=False, highlight=False, soft_wrap=True)
        for more in lines[1:]:
            out.print(indent + more, markup=False, highlight=False, soft_wrap=True)


def show(
    cell: Optional[str] = typer.Argument(None, help="A finished cell or probe: its folder, a path show printed (probes/KEY), or its key "
                                                    "(a unique part is enough); madara ls cells lists them"),
    results: Optional[Path] = results_option(),
    show_all: bool = typer.Option(False, "--all", help="Also print the whole record and the provenance (versions, commit, overrides, times, host)"),
    as_json: bool = typer.Option(False, "--json", help="Print the cell's or probe's record as JSON"),
) -> None:
    """A finished cell or probe at a glance: what ran, EM/F1 with intervals, route and reason, cost (--all: every field and the provenance)."""
    import json

    from madara_cli.results.outputs import CellRecord
    from madara_cli.results.record_files import find_cell, flat_items, read_record

    if not cell:
        raise UserError(f"name a finished cell or probe (its key, a unique part of it, or its folder); "
                        f"madara ls cells{'' if results is None else f' --results {results}'} lists them")
    try:
        folder = find_cell(results_dir_of(results), cell)
        fname, typed = read_record(folder)
    except ValueError as e:
        raise UserError(str(e)) from None
    from madara_cli.core.sidefiles import json_printable, printable

    record = typed.to_dict()
    if as_json:
        print(json_printable(json.dumps(record, indent=2, ensure_ascii=False)))
        return
    if isinstance(typed, CellRecord):
        print_summary(cell_summary_rows(folder, typed), f"{folder.name} ({fname})")
    else:
        print_summary([*probe_summary_rows(typed), _folder_row(folder)], f"{folder.name} ({fname})")
    if not show_all:
        out.print("every field and the provenance: the same command with --all", style="dim", markup=False, highlight=False)
        return
    prov = typed.provenance or {}
    t = Table(title="record", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value", overflow="fold")
    skip = {"provenance", "scores", "per_query", "bootstrap"}
    for k, v in flat_items({k: v for k, v in record.items() if k not in skip}):
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values]"
        t.add_row(printable(k), "" if v is None else printable(v))
    _add_intervals(t, record)
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
