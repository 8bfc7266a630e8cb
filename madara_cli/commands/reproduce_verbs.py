"""``madara reproduce`` (``make reproduce``): every paper grid (:func:`madara_cli.config.paper_grids`:
those whose ``produces:`` names paper tables, probes first), then the tables, Figure 2 and the audit.

vLLM with the paper's models by default; ``--backend llamacpp --models smollm2-135m`` is the CPU
version. Cells whose benchmark cannot load are reported and skipped; all finished work stays on
disk, so a rerun picks up where this one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import typer

from madara_cli.commands.options import err, out, results_dir_of, results_option
from madara_cli.config import find_config, load_grid, options
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.grid import expand
from madara_cli.experiment.runner import Failed, run_cells, run_probes


@dataclass
class ReproduceReport:
    finished: int = 0
    failed: list[Failed] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    unsettled: list = field(default_factory=list)  # table cells several variants could fill (results.stored.Variants)
    figure: Path | None = None
    audit: str = ""


def check_backend(backend: str) -> None:
    """Stop at once, with one line, when the engine cannot run here."""
    if backend not in options("backend"):
        raise ConfigError(f"unknown backend '{backend}'; valid backends: {', '.join(options('backend'))}")
    from madara_cli.composition import ensure_loaded
    from madara_cli.config.folders import default_option, read_yaml
    from madara_cli.plugins.catalog import CATALOG

    ensure_loaded()
    name = str(read_yaml(find_config("backend", backend)).get("name", backend))  # type: ignore[arg-type, union-attr]
    spec = CATALOG.find("backend", name)
    lacking = spec.missing() if spec is not None and spec.missing is not None else None
    if lacking:
        raise ConfigError(f"{lacking}; for the embedded CPU model run: make reproduce "
                          f"BACKEND={default_option('backend')} MODELS={default_option('model')}")


def reproduce_all(backend: str, models: list[str], grids: list[str], results_dir: str = "results", progress=None, extra: list[str] | None = None) -> ReproduceReport:
    from madara_cli.audit import format_audit, run_audit
    from madara_cli.tables import figure2
    from madara_cli.tables.render import render_tables

    check_backend(backend)
    bad = [m for m in models if m not in options("model")]
    if bad:
        raise ConfigError(f"unknown model(s) {', '.join(bad)}; valid models: {', '.join(options('model'))}")
    for g in grids:
        load_grid(g)  # fail before anything runs
    report = ReproduceReport()
    base = [f"backend={backend}", f"results_dir={results_dir}", *(extra or [])]
    for g in grids:
        cfgs = expand(g, base, axes={"model": models} if models else None)
        if load_grid(g).kind == "probes":
            done = run_probes(cfgs, progress, keep_going=True)
        else:
            done = run_cells(cfgs, progress, keep_going=True)
        report.failed += [d for d in done if isinstance(d, Failed)]
        report.finished += sum(1 for d in done if not isinstance(d, Failed))
    out = Path(results_dir)
    written = render_tables(out, out / "tables")
    report.tables, report.unsettled = written.paths, written.unsettled
    from madara_cli.results.stored import load_results

    # A folder the tables could not read is a gap in them, reported as a skipped cell is.
    report.failed += [Failed(folder, f"left out of the tables: {why}") for folder, why in load_results(out).problems]
    report.figure = figure2(out)
    report.audit = format_audit(run_audit(), only="discrepancy")
    return report


def reproduce(
    backend: str = typer.Option("vllm", "--backend", help="vllm (the paper's setting) | llamacpp (CPU) | openai"),
    models: str = typer.Option("llama-3.1-8b,mistral-7b,qwen3-8b,qwen2.5-7b,gemma-2-9b", "--models", help="Comma-separated model configs (replaces each grid's model axis)"),
    grids: Optional[str] = typer.Option(None, "--grids", help="Space- or comma-separated grids (default: every paper grid)"),
    results: Optional[Path] = results_option(),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides for every cell, e.g. benchmark.path=FILE"),
) -> None:
    """Every paper grid, then all tables, Figure 2 and the audit; exits 1 when any cell or probe was skipped."""
    from madara_cli.config import paper_grids
    from madara_cli.config.overrides import last_value, parse_overrides
    from madara_cli.core.progress import StageProgress

    parsed = parse_overrides(overrides or [])
    plain_results = [o for o in parsed if o.key == "results_dir" and not o.prefix]  # a plain results_dir= is the folder
    results_dir = last_value(plain_results, "results_dir")
    results_dir = results_dir if results_dir is not None else str(results_dir_of(results))
    overrides = [o.raw for o in parsed if o not in plain_results]
    names = [g for g in grids.replace(",", " ").split() if g] if grids else paper_grids()
    from madara_cli.commands.table_verbs import warn_unsettled

    with StageProgress(err) as progress:
        report = reproduce_all(backend, [m for m in models.replace(" ", ",").split(",") if m], names, results_dir, progress, overrides)
    warn_unsettled(report.unsettled)
    out.print(f"finished cells and probes: {report.finished}; skipped: {len(report.failed)}")
    for f in report.failed:
        out.print(f"  skipped {f.label}: {f.reason}", markup=False, highlight=False)
    out.print(f"tables: {len(report.tables)} files under {results_dir}/tables" + (f"; figure: {report.figure}" if report.figure else ""))
    out.print(report.audit, markup=False, highlight=False)
    if report.failed:
        err.print(f"reproduce incomplete: {len(report.failed)} cell(s)/probe(s) skipped: " + "; ".join(f.label for f in report.failed),
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
