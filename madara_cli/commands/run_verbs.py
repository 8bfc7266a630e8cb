"""``madara run`` and ``madara plan``: the verbs that run (or
estimate) cells, sweeps and grids, and the tables they print."""

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

# The run table's last note: what its two time columns count.
TIME_NOTE = ("wall s: the cell's elapsed time; engine s Σ: the engine's seconds summed over every request, which exceeds "
             "wall time when requests run in parallel (a server's concurrent requests, a batch)")


def results_table(results, title: str) -> Table:
    t = Table(title=title)
    for col in ("model", "benchmark", "strategy", "n", "EM % [95%]", "F1 %", "contains % [95%]", "calls", "cache hits", "tokens in/out",
                "wall s", "engine s Σ", "status"):
        t.add_column(col, justify="right" if col not in ("model", "benchmark", "strategy", "status") else "left", no_wrap=col == "status")
    from madara_cli.experiment.runner import Failed
    from madara_cli.stats import format_interval, rate_interval

    for r in results:
        if isinstance(r, Failed):
            t.add_row(r.label, "", "", "", "", "", "", "", "", "", "", "", f"skipped: {r.reason}")
            continue
        m = r.record
        a = m.accounting

        def pct(x):
            return "—" if x is None else f"{100 * x:.1f}"

        t.add_row(
            # EM and contains are proportions of the n questions: Wilson's 95% interval (madara_cli.stats).
            r.cell.model, r.cell.benchmark, r.cell.strategy, str(m.n), format_interval(rate_interval(m.em, m.n)), pct(m.f1),
            format_interval(rate_interval(m.contains, m.n)),
            str(a.get("calls_issued", 0)), str(a.get("cache_hits", 0)),
            f"{a.get('tokens_in', 0):,}/{a.get('tokens_out', 0):,}", "—" if m.seconds is None else f"{m.seconds:.1f}", f"{m.engine_seconds:.1f}",
            cell_status(r),
        )
    return t


def cell_status(result) -> str:
    """The run table's status of a finished cell: ``ran`` or ``done earlier``, and
    ``degraded`` when its scores are past the health threshold (results/health.py)."""
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
    from madara_cli.config import load_grid
    from madara_cli.experiment.runner import run_probes
    from madara_cli.progress import StageProgress
    from madara_cli.results.record_files import no_empty_folders_left
    from madara_cli.results.summary import write_summary

    overrides = honoured(with_results(list(overrides or []), results), launcher)
    if cfg_print is not None:
        if cfg_print != "job":
            raise UserError(f"--cfg {cfg_print}: only --cfg job is supported (the composed config of each cell)")
        from omegaconf import OmegaConf

        print("---\n".join(OmegaConf.to_yaml(c) for c in api.configs(overrides, grid=grid, multirun=multirun)), end="")
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
    out.print("[95%]: Wilson score interval of each proportion over its n questions (madara compare A B tests a difference); " + TIME_NOTE,
              style="dim")
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

    t = Table(title=title)
    for col in ("model", "benchmark", "n", "ρ̂1", "ρ̂2", "ρ̂3", "ρ*", "class", "EM_NF %", "route", "status"):
        t.add_column(col)
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
    grid: str = typer.Option(..., "--grid", "-g", help="Grid to estimate (madara ls grids)", autocompletion=complete_grid),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides applied to every cell", autocompletion=complete_override),
    results: Optional[Path] = results_option(),
    rate: Optional[float] = typer.Option(None, "--rate", help="Engine throughput in calls per second to time the uncached calls at "
                                         "(default: the rate measured in the response cache, else by madara bench --only vllm)"),
    config_dir: Optional[List[Path]] = config_dir_option(),
    include: Optional[List[Path]] = include_option(),
) -> None:
    """Cells, calls, prompt and output tokens and engine time per strategy before a grid runs (finished cells count zero; a routed
    cell's RSC probe is counted); measured numbers after."""
    use_folders(config_dir, include)
    from madara_cli.config import load_grid
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.plan import format_per_query, paper_calls_per_query, plan_grid

    if load_grid(grid).kind == "probes":
        raise UserError(f"grid {grid} holds probes; plan estimates strategy grids")
    if rate is not None and not rate > 0:
        raise UserError(f"--rate {rate:g}: a throughput in engine calls per second must be > 0")
    p = plan_grid(grid, expand(grid, honoured(with_results(list(overrides or []), results))), rate=rate)
    t = Table(title=f"plan: grid {grid} ({len(p.cells)} cells)")
    for col in ("strategy", "cells", "requests", "per query", "probe", "Table 18", "engine calls", "already cached", "prompt tokens",
                "output tokens ≤", "est. time", "measured cells", "measured requests", "measured calls"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    rows = list(p.by_strategy.items()) + [("total", p.total())]
    for name, s in rows:
        est = f" ({s.estimated_cells} est.)" if s.estimated_cells else ""
        est += f" ({s.finished_cells} done)" if s.finished_cells else ""
        per_query, paper = ("—", "—") if name == "total" else (format_per_query(s), paper_calls_per_query(name))
        t.add_row(name, f"{s.cells}{est}", f"{s.requests:,}", per_query, f"{s.probe_requests:,}" if s.probe_requests else "—", paper,
                  f"{s.calls:,}", f"{s.cached:,}", f"{s.prompt_tokens:,}", f"{s.output_tokens:,}", _plan_time(s),
                  str(s.measured_cells), f"{s.measured_requests:,}" if s.measured_cells else "—", f"{s.measured_calls:,}" if s.measured_cells else "—")
    out.print(t)
    out.print("engine calls count work shared through the response cache once, finished cells none; prompt tokens ≈ characters / 4; "
              "output tokens ≤: the uncached calls' max_tokens (a score request reads one token); "
              "per query: the strategy's own scoring + other requests per query, beside Table 18's note on LLM calls per query; "
              "probe: the requests of madara's one-time RSC probe on the calibration split (in requests); "
              "est. time: the uncached calls at --rate, else the engine's seconds per call measured in the cache or by madara bench --only vllm "
              "(— before any)", style="dim")
    if p.total().estimated_cells:
        out.print(f"{p.total().estimated_cells} cell(s) are estimates: their data is not here yet, so they were counted "
                  "on placeholder queries (limit, else benchmark.sample capped at the known size, k passages each)", highlight=False)
    for n in p.notes:
        out.print(str(n), style="dim", highlight=False)


def _plan_time(s) -> str:
    """Estimated engine time of a plan row: "—" without a measured rate, "≥" when only
    some of its uncached calls have one."""
    from madara_cli.progress import _duration

    uncached = s.calls - s.cached
    if uncached <= 0:
        return "0s"
    if not s.timed_calls:
        return "—"
    return ("" if s.timed_calls + 0.5 >= uncached else "≥ ") + _duration(s.seconds)
