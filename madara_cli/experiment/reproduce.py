"""``make reproduce``: every paper grid (:func:`madara_cli.config.paper_grids`: the grids
whose ``produces:`` names paper tables, probes first), then the tables, Figure 2 and the audit.

The default engine is vLLM with the paper's models; ``--backend llamacpp --models
smollm2-135m`` is the CPU version. Cells whose benchmark cannot be loaded (no hub,
no local file) are reported and skipped, the rest run; everything finished stays
on disk, so a rerun picks up where this one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from madara_cli.config import find_config, load_grid, options
from madara_cli.errors import ConfigError
from madara_cli.experiment.grid import expand
from madara_cli.experiment.runner import Failed, run_cells, run_probes


@dataclass
class ReproduceReport:
    finished: int = 0
    failed: list[Failed] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    figure: Path | None = None
    audit: str = ""


def check_backend(backend: str) -> None:
    """Stop at once, with one line, when the engine cannot run here."""
    if backend not in options("backend"):
        raise ConfigError(f"unknown backend '{backend}'; valid backends: {', '.join(options('backend'))}")
    from madara_cli.backends import BACKENDS, load_builtin
    from madara_cli.config.folders import default_option, read_yaml

    load_builtin()
    name = str(read_yaml(find_config("backend", backend)).get("name", backend))  # type: ignore[arg-type, union-attr]
    spec = BACKENDS.find(name)
    lacking = spec.missing() if spec is not None and spec.missing is not None else None
    if lacking:
        raise ConfigError(f"{lacking}; for the embedded CPU model run: make reproduce "
                          f"BACKEND={default_option('backend')} MODELS={default_option('model')}")


def reproduce(backend: str, models: list[str], grids: list[str], results_dir: str = "results", progress=None, extra: list[str] | None = None) -> ReproduceReport:
    from madara_cli.audit import format_audit, run_audit
    from madara_cli.tables import figure2, write_tables

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
    report.tables = write_tables(out, out / "tables")
    from madara_cli.results.stored import load_results

    # A folder the tables could not read is a gap in them, reported as a skipped cell is.
    report.failed += [Failed(folder, f"left out of the tables: {why}") for folder, why in load_results(out).problems]
    report.figure = figure2(out)
    report.audit = format_audit(run_audit(), only="discrepancy")
    return report
