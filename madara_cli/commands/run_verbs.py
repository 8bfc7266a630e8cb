"""``madara run`` and ``madara plan``: the verbs that run (or estimate) cells, sweeps and grids, and their tables."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from madara_cli.commands.options import (
    UserError,
    complete_grid,
    complete_override,
    config_dir_option,
    err,
    honoured,
    include_option,
    out,
    results_option,
    use_folders,
    with_results,
)


def results_table(results, title: str) -> Table:
    """The run table: ``madara ls cells``'s columns, each cell's status (ran, done earlier, degraded, skipped and why) for health."""
    from madara_cli.experiment.runner import Failed
    from madara_cli.results.summary import cell_result, cells_table

    done = [r for r in results if not isinstance(r, Failed)]
    t = cells_table([cell_result(r.record, None) for r in done], [cell_status(r) for r in done], title)
    for r in results:
        if isinstance(r, Failed):
            t.add_row(r.label, "", "", "", "", "", f"skipped: {r.reason}", "", "")
    return t


def cell_status(result) -> str:
    """A finished cell's status: ``ran`` or ``done earlier``, ``degraded`` past the health threshold (results/health.py)."""
    degraded = result.record.health.degraded
    if result.skipped:
        return "done earlier, degraded" if degraded else "done earlier"
    return "degraded" if degraded else "ran"


def run(
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, e.g. model=smollm2-135m strategy=nf limit=20",
                                                    autocompletion=complete_override),
    grid: Optional[str] = typer.Option(None, "--grid", "-g", help="Run every cell of configs/grid/NAME.yaml", autocompletion=complete_grid),
    multirun: bool = typer.Option(False, "--multirun", "-m", help="Sweep comma-separated overrides (strategy=nf,pde seed=0,1) like Hydra's multirun"),
    cfg_print: Optional[str] = typer.Option(None, "--cfg", help="job: print the composed config of each cell as YAML and exit"),
    results: Optional[Path] = results_option(),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="Run the grid's cells through a Hydra launcher: joblib | submitit_slurm | submitit_local | ray"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Parallel processes for --launcher joblib"),
    config_dir: Optional[List[Path]] = config_dir_option(),
    include: Optional[List[Path]] = include_option(),
) -> None:
    """Run one cell (overrides), a sweep (-m key=a,b) or a whole grid (--grid NAME); finished cells are skipped."""
    use_folders(config_dir, include)
    from madara_cli import api
    from madara_cli.commands.list_verbs import CALLS_TIME
    from madara_cli.config import load_grid
    from madara_cli.core.progress import StageProgress
    from madara_cli.experiment.runner import run_probes
    from madara_cli.results.record_files import no_empty_folders_left
    from madara_cli.results.summary import write_summary

    overrides = honoured(with_results(list(overrides or []), results), launcher)
    if cfg_print is not None:
        if cfg_print != "job":
            raise UserError(f"--cfg {cfg_print}: only --cfg job is supported (the composed config of each cell)")

        print("---\n".join(c.to_yaml() for c in api.configs(overrides, grid=grid, multirun=multirun)), end="")
        return
    if launcher:
        if not grid:
            raise UserError("--launcher needs --grid NAME")
        from madara_cli.experiment.launch import multirun as launch_multirun
        from madara_cli.experiment.launch import read_back

        with no_empty_folders_left([_results_root(overrides)]):
            launched = launch_multirun(grid, overrides, launcher, jobs)
        back = read_back(launched)
        out.print(results_table(back.finished, f"grid {grid} ({launcher})"))
        if back.missing:
            raise UserError(f"{len(back.missing)} cell(s) did not finish under the {launcher} launcher ({', '.join(back.missing)}); rerun to resume")
        _write_summaries(launched, write_summary)
        return
    cfgs = api.configs(overrides, grid=grid, multirun=multirun)
    if grid and load_grid(grid).kind == "probes":
        with no_empty_folders_left({str(c.results_dir) for c in cfgs}), StageProgress(err) as progress:
            probes = run_probes(cfgs, progress)
        out.print(probes_table(probes, f"grid {grid}"))
        return
    with StageProgress(err) as progress:
        results_ = api.run_configs(cfgs, progress=progress)
    title = f"grid {grid}" if grid else f"sweep ({len(cfgs)} cells)" if multirun else "cell"
    out.print(results_table(results_, title))
    out.print(f"[95%]: Wilson interval over the cell's n questions (madara compare A B tests a difference); {CALLS_TIME}", style="dim")
    for r in results_:
        out.print(str(r.folder), style="dim")


def _results_root(overrides: list[str]) -> str:
    """The results folder a launched grid writes (its last ``results_dir=``, else the default)."""
    from madara_cli.config.overrides import last_value, parse_overrides

    return last_value(parse_overrides(overrides), "results_dir") or "results"


def _write_summaries(cfgs, write_summary) -> None:
    for d in dict.fromkeys(str(c.results_dir) for c in cfgs):
        write_summary(d)


def probes_table(probes, title: str) -> Table:
    from madara_cli.experiment.runner import Failed

    t = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold", title=title, title_justify="left")
    for col in ("model", "benchmark", "n", "ρ̂1", "ρ̂2", "ρ̂3", "ρ*", "class", "EM_NF %", "route", "status"):
        t.add_column(col, overflow="fold")
    for p in probes:
        if isinstance(p, Failed):
            t.add_row(p.label, "", "", "", "", "", "", "", "", "", f"skipped: {p.reason}")
            continue
        r, _, reused = p
        fmt = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
        t.add_row(r.model, r.benchmark, str(r.n), *(fmt(r.rho_at(k)) for k in range(3)), fmt(r.rho_star), str(r.rsc_class),
                  "—" if r.em_nf is None else f"{100 * r.em_nf:.1f}", str(r.route), "done earlier" if reused else "ran")
    return t


def plan(
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides: one cell (strategy=three_agent limit=5), "
                                                    "or applied to every cell of --grid", autocompletion=complete_override),
    grid: Optional[str] = typer.Option(None, "--grid", "-g", help="Grid to estimate (madara ls grids); without it, the one cell "
                                       "the overrides make", autocompletion=complete_grid),
    multirun: bool = typer.Option(False, "--multirun", "-m", help="Sweep comma-separated overrides (strategy=nf,pde seed=0,1), as run -m does"),
    results: Optional[Path] = results_option(),
    rate: Optional[float] = typer.Option(None, "--rate", help="Engine throughput in calls per second to time the uncached calls at "
                                         "(default: the engine's calibration: measured in the response cache, by madara bench, or a prior)"),
    as_json: bool = typer.Option(False, "--json", help="The plan as JSON on stdout (every number in full, and each engine's calibration)"),
    as_csv: bool = typer.Option(False, "--csv", help="The plan as CSV on stdout: one row per strategy and the total"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Processes that compose and walk the cells, at most one "
                                       "per CPU (default: one per CPU, up to 8, for a grid of 200 cells or more on Linux; else 1); the plan is the same"),
    config_dir: Optional[List[Path]] = config_dir_option(),
    include: Optional[List[Path]] = include_option(),
) -> None:
    """Cells, requests, calls, prompt and output tokens and engine time per strategy before a grid or a cell runs (finished cells
    count zero; a routed cell's RSC probe is counted; the time says which calibration it rests on); measured numbers after."""
    use_folders(config_dir, include)
    from madara_cli.commands import plan_output
    from madara_cli.composition import compose
    from madara_cli.config import load_grid
    from madara_cli.experiment.grid import grid_cells, has_sweep, sweep_cells
    from madara_cli.experiment.plan import plan_cells, plan_grid, plan_jobs

    if jobs is not None and plan_jobs(1, jobs) < jobs:
        err.print(f"plan: -j {jobs} is more than this machine's {plan_jobs(1, jobs)} CPUs; planning with {plan_jobs(1, jobs)} processes",
                  style="yellow", markup=False, highlight=False, soft_wrap=True)
    if as_json and as_csv:
        raise UserError("--json and --csv: pick one output")
    if grid and load_grid(grid).kind == "probes":
        raise UserError(f"grid {grid} holds probes; plan estimates strategy grids")
    if rate is not None and not rate > 0:
        raise UserError(f"--rate {rate:g}: a throughput in engine calls per second must be > 0")
    overrides = honoured(with_results(list(overrides or []), results))
    if not grid and not multirun and has_sweep(overrides):
        raise UserError("comma-separated values sweep: add -m/--multirun (madara plan -m strategy=nf,pde), "
                        "or quote a literal list as key=[a,b]")
    shown = [o for o in overrides if not str(o).startswith("results_dir=")]
    walking = plan_output.Heartbeat("plan: composing and walking", err)
    try:
        if grid or multirun:
            name, cells = (grid, grid_cells(grid, overrides)) if grid else sweep_cells(overrides)
            title = f"plan: grid {grid} ({len(cells):,} cells)" if grid else f"plan: sweep ({len(cells):,} cells)"
            p = plan_cells(name, cells, rate=rate, jobs=jobs, progress=walking)
        else:
            cfg = compose(overrides)
            title = f"plan: one cell ({' '.join(shown) or 'the defaults'})"
            p = plan_grid(str(cfg.grid_name), [cfg], rate=rate)
    finally:
        walking.close()
    plan_output.show(p, title, "json" if as_json else "csv" if as_csv else "table", out)
