"""The ``madara`` command line. Each verb parses its arguments and calls one library
function; errors a user can cause end with one line on stderr and exit 2."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    add_completion=True,  # madara --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Reproduce 'To Isolate or to Score?' (MADARA) and run its Diagnose->Treat pipeline.",
)
# Tables stay readable when piped (rich would otherwise assume 80 columns).
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


class UserError(Exception):
    """Printed as one line, exit 2."""


def _results_option(default: Optional[Path] = None):
    """The one results-folder option every verb takes (``results_dir=DIR`` is the same
    setting as an override)."""
    return typer.Option(default, "--results", envvar="MADARA_RESULTS", help="Results folder (same as the results_dir=DIR override; env MADARA_RESULTS)")


def _with_results(overrides: list[str], results: Optional[Path]) -> list[str]:
    """``--results DIR`` as the ``results_dir=`` override; an explicit override wins."""
    if results is None or any(o.split("=", 1)[0].lstrip("+~") == "results_dir" for o in overrides):
        return overrides
    return [f"results_dir={results}", *overrides]


def _honoured(overrides: list[str], launcher: Optional[str] = None) -> list[str]:
    """Refuse, in one line, an override madara would accept and then ignore: Hydra's own
    settings (``hydra.run.dir=...``: madara runs no Hydra app, except the job launch of
    ``--launcher``, which reads ``hydra.launcher.*``) and ``+key`` adding a key to a
    schema that nothing reads."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from madara_cli.config import RootConfig
    from madara_cli.config.validate import _schema_field

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return overrides  # compose names the malformed one
    for text, o in zip(overrides, parsed):
        key = o.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            if launcher and key.startswith(("hydra.launcher.", "hydra/launcher")):
                continue
            where = (f"under --launcher {launcher} only hydra.launcher.* settings apply" if launcher else
                     "hydra.* settings apply only to a grid's launch (--launcher NAME: hydra.launcher.*)")
            raise UserError(f"'{text}' is not honoured: madara runs no Hydra app of its own, so {where}; "
                            "results go to results_dir=DIR, logs to stderr")
        if (o.is_add() or o.is_force_add()) and not key.startswith("strategy."):
            found = _schema_field(RootConfig, key)
            if found is not None and found[0] == "unknown":
                import dataclasses

                valid = ", ".join(f.name for f in dataclasses.fields(found[1]))
                raise UserError(f"'{text}' adds a setting madara does not read (its schemas are closed; "
                                f"valid {key.rsplit('.', 1)[0] + ' ' if '.' in key else ''}keys: {valid})")
            if found is not None and o.is_add():
                raise UserError(f"'{text}': {key} is an existing setting; set it without the '+': {text.lstrip('+')}")
    return overrides


def _results_dir(results: Optional[Path]) -> Path:
    return results if results is not None else Path("results")


@app.callback()
def _global(
    config_dir: Optional[List[Path]] = typer.Option(None, "--config-dir", help="Extra config folder (Hydra's convention): its group options add to or replace the shipped ones; repeatable"),
    include: Optional[List[Path]] = typer.Option(None, "--include", help="Folder of Python modules registering strategies, backends or retrievers (imported by path); repeatable"),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="Log what happens (-v info, -vv debug)"),
) -> None:
    """Options every verb shares."""
    from madara_cli.config import add_config_dir
    from madara_cli.experiment.plugins import add_include, install_loader, load_plugins
    from madara_cli.logs import setup_logging

    for d in config_dir or []:
        add_config_dir(d)
    for d in include or []:
        add_include(d)
    setup_logging(verbose, err)
    install_loader()  # the first composition imports the plugins
    if include:
        load_plugins()  # a folder asked for by name: its errors now, whatever the verb


def _results_table(results, title: str) -> Table:
    t = Table(title=title)
    for col in ("model", "benchmark", "strategy", "n", "EM %", "F1 %", "contains %", "calls", "cache hits", "tokens in/out", "engine s", "status"):
        t.add_column(col, justify="right" if col not in ("model", "benchmark", "strategy", "status") else "left")
    from madara_cli.experiment.runner import Failed

    for r in results:
        if isinstance(r, Failed):
            t.add_row(r.label, "", "", "", "", "", "", "", "", "", "", f"skipped: {r.reason}")
            continue
        m = r.record
        a = m.accounting

        def pct(x):
            return "—" if x is None else f"{100 * x:.1f}"

        t.add_row(
            r.cell.model, r.cell.benchmark, r.cell.strategy, str(m.n), pct(m.em), pct(m.f1), pct(m.contains),
            str(a.get("calls_issued", 0)), str(a.get("cache_hits", 0)),
            f"{a.get('tokens_in', 0):,}/{a.get('tokens_out', 0):,}", f"{m.engine_seconds:.1f}", "done earlier" if r.skipped else "ran",
        )
    return t


@app.command(context_settings={"allow_extra_args": False})
def run(
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, e.g. model=smollm2-135m strategy=nf limit=20"),
    grid: Optional[str] = typer.Option(None, "--grid", "-g", help="Run every cell of configs/grid/NAME.yaml"),
    multirun: bool = typer.Option(False, "--multirun", "-m", help="Sweep comma-separated overrides (strategy=nf,pde seed=0,1) like Hydra's multirun"),
    cfg_print: Optional[str] = typer.Option(None, "--cfg", help="job: print the composed config of each cell as YAML and exit"),
    results: Optional[Path] = _results_option(),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="Run the grid's cells through a Hydra launcher: joblib | submitit_slurm | submitit_local | ray"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Parallel processes for --launcher joblib"),
) -> None:
    """Run one cell (overrides), a sweep (-m key=a,b) or a whole grid (--grid NAME); finished cells are skipped."""
    from madara_cli.config import compose, load_grid
    from madara_cli.experiment.grid import expand, expand_sweep, has_sweep
    from madara_cli.experiment.runner import finished_cell, run_cells, run_probes
    from madara_cli.progress import StageProgress
    from madara_cli.results.record_files import no_empty_folders_left
    from madara_cli.results.summary import write_summary

    overrides = _honoured(_with_results(list(overrides or []), results), launcher)
    if cfg_print is not None:
        if cfg_print != "job":
            raise UserError(f"--cfg {cfg_print}: only --cfg job is supported (the composed config of each cell)")
        from omegaconf import OmegaConf

        cfgs = expand(grid, overrides) if grid else expand_sweep(overrides) if multirun else [compose(overrides)]
        print("---\n".join(OmegaConf.to_yaml(c) for c in cfgs), end="")
        return
    if not grid and not multirun and has_sweep(overrides):
        raise UserError("comma-separated values sweep: add -m/--multirun (madara run -m strategy=nf,pde), "
                        "or quote a literal list as key=[a,b]")
    if launcher:
        if not grid:
            raise UserError("--launcher needs --grid NAME")
        from madara_cli.experiment.launch import multirun as launch_multirun

        with no_empty_folders_left([_results_root(overrides)]):
            launched = launch_multirun(grid, overrides, launcher, jobs)
        # Read back what the workers wrote; nothing runs here (a missing cell is reported).
        found = [(cfg, finished_cell(cfg, sized=True)) for cfg in launched]
        results = [r for _, r in found if r is not None]
        out.print(_results_table(results, f"grid {grid} ({launcher})"))
        missing = [f"{c.model.name}/{c.benchmark.name}/{c.strategy.name}" for c, r in found if r is None]
        if missing:
            raise UserError(f"{len(missing)} cell(s) did not finish under the {launcher} launcher ({', '.join(missing)}); rerun to resume")
        _write_summaries(launched, write_summary)
        return
    if grid and load_grid(grid).kind == "probes":
        cfgs = expand(grid, overrides)
        with no_empty_folders_left({str(c.results_dir) for c in cfgs}), StageProgress(err) as progress:
            probes = run_probes(cfgs, progress)
        out.print(_probes_table(probes, f"grid {grid}"))
        return
    cfgs = expand(grid, overrides) if grid else expand_sweep(overrides) if multirun else [compose(overrides)]
    with no_empty_folders_left({str(c.results_dir) for c in cfgs}), StageProgress(err) as progress:
        results_ = run_cells(cfgs, progress)
    title = f"grid {grid}" if grid else f"sweep ({len(cfgs)} cells)" if multirun else "cell"
    out.print(_results_table(results_, title))
    for r in results_:
        out.print(f"[dim]{r.folder}[/dim]")
    _write_summaries(cfgs, write_summary)


def _results_root(overrides: list[str]) -> str:
    """The results folder a launched grid writes (its last ``results_dir=``, else the default)."""
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == "results_dir"]
    return given[-1] if given else "results"


def _write_summaries(cfgs, write_summary) -> None:
    for d in dict.fromkeys(str(c.results_dir) for c in cfgs):
        write_summary(d)


def _probes_table(probes, title: str) -> Table:
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


@app.command("ls")
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
        from madara_cli.config import compose

        for name in options("model"):
            m = compose([f"model={name}"]).model
            out.print(f"{name}: {m.hf_id} (chat: {ChatSettings.from_model(m).describe()})", highlight=False)
        return
    for name, group in groups.items():
        if what in (None, name):
            out.print(f"[bold]{name}[/bold]: {', '.join(options(group))}")


@app.command()
def plan(
    grid: str = typer.Option(..., "--grid", "-g", help="Grid to estimate (madara ls grids)"),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides applied to every cell"),
    results: Optional[Path] = _results_option(),
) -> None:
    """Cells, calls and prompt tokens per strategy before a grid runs; measured numbers after."""
    from madara_cli.config import load_grid
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.plan import format_per_query, paper_calls_per_query, plan_grid

    if load_grid(grid).kind == "probes":
        raise UserError(f"grid {grid} holds probes; plan estimates strategy grids")
    p = plan_grid(grid, expand(grid, _honoured(_with_results(list(overrides or []), results))))
    t = Table(title=f"plan: grid {grid} ({len(p.cells)} cells)")
    for col in ("strategy", "cells", "requests", "per query", "Table 18", "engine calls", "already cached", "prompt tokens", "est. time",
                "measured cells", "measured requests", "measured calls"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    rows = list(p.by_strategy.items()) + [("total", p.total())]
    for name, s in rows:
        est = f" ({s.estimated_cells} est.)" if s.estimated_cells else ""
        per_query, paper = ("—", "—") if name == "total" else (format_per_query(s), paper_calls_per_query(name))
        t.add_row(name, f"{s.cells}{est}", f"{s.requests:,}", per_query, paper, f"{s.calls:,}", f"{s.cached:,}", f"{s.prompt_tokens:,}", _plan_time(s),
                  str(s.measured_cells), f"{s.measured_requests:,}" if s.measured_cells else "—", f"{s.measured_calls:,}" if s.measured_cells else "—")
    out.print(t)
    out.print("[dim]engine calls count work shared through the response cache once; prompt tokens ≈ characters / 4; "
              "per query: the strategy's own scoring + other requests per query, beside Table 18's note on LLM calls per query; "
              "est. time: the uncached calls at the engine's seconds per call measured in the cache (— before any)[/dim]")
    if p.total().estimated_cells:
        out.print(f"[yellow]{p.total().estimated_cells} cell(s) are estimates[/yellow]: their data is not here yet, so they were counted "
                  "on placeholder queries (limit or benchmark.sample of them, k passages each)", highlight=False)
    for n in p.notes:
        out.print(f"[dim]{n}[/dim]", highlight=False)


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


@app.command()
def probe(
    model: str = typer.Option("smollm2-135m", "--model", help="Model config name (madara ls models)"),
    benchmark: str = typer.Option("mini", "--benchmark", "-b", help="Benchmark config name"),
    n: Optional[int] = typer.Option(None, "--n", min=1, help="Calibration queries (default: benchmark.calibration, 100 for the paper's benchmarks)"),
    force: bool = typer.Option(False, "--force", help="Recompute even if a finished probe exists (completions still come from the cache)"),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, e.g. backend=vllm benchmark.path=FILE"),
    results: Optional[Path] = _results_option(),
) -> None:
    """Diagnose a model-task pair: NF baseline + RSC probe -> route; writes results/probes/<key>/."""
    from madara_cli.config import compose
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.treat import ensure_probe
    from madara_cli.progress import StageProgress
    from madara_cli.results.record_files import no_empty_folders_left

    cfg = compose(_with_results([f"model={model}", f"benchmark={benchmark}", *_honoured(list(overrides or []))], results))
    with no_empty_folders_left([str(cfg.results_dir)]), StageProgress(err) as progress, EnginePool(progress=progress) as pool:
        progress.label = f"probe {model}/{benchmark}"
        try:
            record, path, reused = ensure_probe(cfg, pool, n, force=force)
        except ValueError as e:
            raise UserError(str(e)) from None
    _print_probe(record, path, reused)


def _print_probe(r, path: Path, reused: bool) -> None:
    """A probe record (:class:`madara_cli.results.outputs.ProbeRecord`) as a table and notes."""
    def f(x, fmt="{:.2f}"):
        return "—" if x is None else fmt.format(x)

    t = Table(title=f"RSC probe: {r.model} on {r.benchmark} (n={r.n}){' — reused' if reused else ''}")
    for col in ("level", "ρ̂ (pooled)", "p", "95% CI", "per-query mean ± std"):
        t.add_column(col)
    for k, level in enumerate(("shuffled", "contradicted", "random")):
        ci = r.ci_at(k)
        mean, std = r.per_query_at(k)
        t.add_row(level, f(r.rho_at(k)), f(r.p_value_at(k), "{:.1e}"), "—" if not ci else f"[{f(ci[0])}, {f(ci[1])}]", f"{f(mean)} ± {f(std)}")
    out.print(t)
    out.print(
        f"ρ* = {f(r.rho_star)}   ρ̄ = {f(r.rho_bar)}   class: [bold]{r.rsc_class}[/bold]"
        f"   coupling: {r.coupling or '—'}   bootstrap stability: {f(r.stability, '{:.0%}')}"
    )
    if r.is_degenerate:
        deg = r.degenerate
        out.print(f"[yellow]degenerate scoring:[/yellow] floor {f(deg.floor_share, '{:.0%}')}, ceiling {f(deg.ceiling_share, '{:.0%}')}, "
                  f"mean {f(deg.mean_score)}/5 — {deg.reason or ''}")
    out.print(f"re-score: rsc.rescore={r.rescore or '—'}, rsc.rescoring={r.rescoring or '—'}", highlight=False)
    sc = r.scores
    if sc is not None and sc.n_pairs:
        excluded = sc.chains_empty or 0
        probed = sc.n_pairs_probed if sc.n_pairs_probed is not None else sc.n_pairs
        hint = "  (unparseable replies are dropped; rsc.rescoring=logprob reads every re-score)" if sc.parse_failures_rescored else ""
        out.print(
            f"parse failures: CoT {sc.parse_failures_normal or 0}/{sc.n_pairs}, "
            f"re-scored {sc.parse_failures_rescored or 0}/{3 * probed}{hint}", highlight=False
        )
        if excluded:
            out.print(f"{excluded}/{sc.n_pairs} chains were empty once their score fields were removed: those pairs were not probed")
    out.print(f"score entropy {f(r.entropy)}   EM_NF {f(None if r.em_nf is None else 100 * r.em_nf, '{:.1f}')}%")
    iso = r.isolation
    if iso is not None:
        out.print(
            f"isolation ({iso.strategy}, k={iso.top_k}): EM {f(iso.em_iso, '{:.1f}')}% vs NF {f(iso.em_nf, '{:.1f}')}%, "
            f"Δ_iso {f(iso.gain, '{:+.1f}')} pt, b/c {iso.b}/{iso.c}, exact McNemar p = {f(iso.p_value, '{:.3g}')} ({iso.requests} requests)",
            highlight=False,
        )
    out.print(f"[bold]route:[/bold] {r.route} — {r.reason}")
    if iso is not None and iso.route:
        out.print(f"[bold]route (router.policy=isolation):[/bold] {iso.route} — {iso.reason}")
    out.print(f"[dim]{path}[/dim]")


def _compare_policies_published(thresholds) -> None:
    from madara_cli.audit.policies import POLICIES, POLICY_LABELS, compare_policies, format_gap, mean_gaps, where_they_differ

    rows = compare_policies(thresholds)
    t = Table(title="routing policies on the paper's published numbers (oracle gap in EM points)")
    for col in ("pair", "NF %", "Δ_iso (p)", *(POLICY_LABELS[p] for p in POLICIES), "oracle", *(f"gap: {POLICY_LABELS[p]}" for p in POLICIES)):
        t.add_column(col)
    for r in rows:
        iso = "—" if r.pair.iso is None else f"{r.pair.iso.gain:+.1f} ({r.pair.iso.p_value:.2g})"
        t.add_row(r.pair.name, f"{r.pair.em_nf:g}", iso, *(r.routes[p] for p in POLICIES), f"{r.oracle[0]} {r.oracle[1]:g}",
                  *(format_gap(r, p) for p in POLICIES))
    out.print(t)
    means, n = mean_gaps(rows)
    out.print(f"mean oracle gap over the {n} pairs where every route has a printed EM: "
              + ", ".join(f"{POLICY_LABELS[p]} {means[p]:.2f}" for p in POLICIES), highlight=False)
    table2 = [r for r in rows if r.pair.setting == "Table 2"]
    kept = sum(1 for r in table2 if r.routes["isolation"] == _table2_route(r))
    out.print(f"isolation policy keeps {kept}/{len(table2)} of Table 2's routes; where it differs from the paper's policy: "
              + where_they_differ(rows), highlight=False)
    out.print("[dim]† routed treatment's EM not printed: the gap if it scored like the worst / best printed scoring treatment. "
              "Δ_iso from printed EMs: p is the least significant exact McNemar any pairing allows; PDE stands in where only PDE is printed.[/dim]")


def _table2_route(row) -> str:
    from madara_cli import paper as pv

    return pv.TABLE2[(row.pair.model, row.pair.benchmark, "strategy")]


def _route_published(thresholds) -> None:
    from madara_cli import paper as pv
    from madara_cli.audit import published_diagnostics
    from madara_cli.diagnose import router

    t = Table(title="router.route on the paper's published diagnostics")
    for col in ("model", "task", "NF %", "ρ̂1 ρ̂2 ρ̂3", "class", "route", "paper (Table 2)", "reason"):
        t.add_column(col)
    agree = total = 0
    for (model, benchmark), diag in published_diagnostics(triviaqa=True).items():
        decision = router.route(diag, thresholds)
        paper = pv.TABLE2.get((model, benchmark, "strategy"))
        if paper:
            total += 1
            agree += paper == decision.strategy
        rho = " ".join(f"{r:.2f}" for r in diag.rho) if diag.rho else "—"
        t.add_row(model, benchmark, f"{diag.em_nf:g}", rho, str(diag.rsc_class), decision.strategy, paper or "n/a", decision.reason)
    out.print(t)
    out.print(f"{agree}/{total} of Table 2's routes reproduced")


@app.command()
def route(
    nf: Optional[float] = typer.Option(None, "--nf", help="No-Filter EM on the calibration set, in percent"),
    rho: Optional[Tuple[float, float, float]] = typer.Option(None, "--rho", help="rho_1 rho_2 rho_3 (shuffled, contradicted, random); omit for degenerate scoring"),
    rsc_class: Optional[str] = typer.Option(None, "--class", help="quality-ordered | stochastic | degenerate (derived from --rho when omitted)"),
    entropy: Optional[float] = typer.Option(None, "--entropy", help="normalised score entropy (for the entropy policy)"),
    tau_nf: float = typer.Option(30.0, "--tau-nf", help="NF threshold (percent)"),
    rho1: float = typer.Option(0.5, "--rho1", help="rho_1 threshold between weak and strong coupling"),
    published: bool = typer.Option(False, "--published", help="Route the paper's own diagnostics (Table 2's ten pairs + D.2's two TriviaQA cells)"),
    policy: str = typer.Option("paper", "--policy", help="paper (Algorithm 2) | isolation (madara's: the NF gate informed by the isolation gain)"),
    iso_em: Optional[float] = typer.Option(None, "--iso-em", help="isolation policy: PDE-Random EM in percent on the same queries as --nf"),
    iso_n: Optional[int] = typer.Option(None, "--iso-n", min=1, help="isolation policy: how many queries --nf and --iso-em were measured on"),
) -> None:
    """What MADARA would route to, and why, from diagnostics alone (runs nothing)."""
    from madara_cli.diagnose import router

    if policy not in router.POLICIES:
        raise UserError(f"--policy {policy!r} is not a routing policy; valid: {', '.join(router.POLICIES)}")
    thresholds = router.Thresholds(tau_nf=tau_nf, rho1=rho1)
    if published:
        if policy == router.ISOLATION:
            _compare_policies_published(thresholds)
        else:
            _route_published(thresholds)
        return
    if nf is None:
        raise UserError("route needs --nf PERCENT (and --rho R1 R2 R3), or --published")
    bad = [x for x in (rho or ()) if not -1.0 <= x <= 1.0]
    if bad:
        raise UserError(f"--rho values are Spearman correlations in [-1, 1]; got {' '.join(f'{x:g}' for x in rho)}")
    if not 0.0 <= nf <= 100.0:
        raise UserError(f"--nf is an EM percentage in [0, 100]; got {nf:g}")
    try:
        diag = router.Diagnostics(em_nf=nf, rho=tuple(rho) if rho else None, rsc_class=rsc_class, entropy=entropy)
    except ValueError as e:
        raise UserError(str(e)) from None
    iso = None
    if (iso_em is None) != (iso_n is None):
        raise UserError("the isolation gain needs both --iso-em PERCENT and --iso-n QUERIES")
    if iso_em is not None:
        if not 0.0 <= iso_em <= 100.0:
            raise UserError(f"--iso-em is an EM percentage in [0, 100]; got {iso_em:g}")
        iso = router.Isolation.from_published(nf, iso_em, iso_n, "given")
    elif policy == router.ISOLATION:
        out.print("[yellow]no --iso-em/--iso-n: the isolation policy has no measurement and routes as the paper's[/yellow]")
    try:
        decision = router.route_policy(policy, diag, iso, thresholds)
    except ValueError as e:
        raise UserError(str(e)) from None
    out.print(f"[bold]route:[/bold] {decision.strategy}")
    out.print(f"[bold]reason:[/bold] {decision.reason}")
    nf_only = router.route_nf_only(diag, tau_nf)
    out.print(f"[dim]NF-only policy: {nf_only.strategy}" + (f"; entropy policy: {router.route_entropy(diag).strategy}" if entropy is not None else "") + "[/dim]")


@app.command()
def tables(
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated tables, e.g. table2,table4 (default: all)"),
    format: str = typer.Option("md,tex,csv,long", "--format", "-f", help="Comma-separated: md, tex, csv, long (tidy numeric CSV)"),
    results: Optional[Path] = _results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: RESULTS/tables)"),
    metric: str = typer.Option("em", "--metric", help="What our cells show: em (EM as the paper's authors compute it: SQuAD normalisation), em_strict (Section 5.4's literal lower-case + whitespace), f1, contains"),
    routing_nf: str = typer.Option(
        "calibration", "--routing-nf",
        help="NF EM Tables 8/9/19 route on: calibration (the probe's, as strategy=madara) or full (the NF cell)",
    ),
) -> None:
    """Write every paper table (ours beside the paper's) from the results on disk; never runs anything.

    Result folders that cannot be read are named and left out; the other tables are
    written, and the exit status is 1 so that a script notices the gap."""
    from madara_cli.results.stored import TABLE_METRICS, load_results
    from madara_cli.tables import write_tables
    from madara_cli.tables.figure import write_figure2

    if metric not in TABLE_METRICS:
        raise UserError(f"unknown metric '{metric}'; valid: {', '.join(TABLE_METRICS)}")
    results_dir = _results_dir(results)
    if not results_dir.is_dir():
        raise UserError(f"no results folder {results_dir} (run a grid first, or pass --results DIR / set MADARA_RESULTS)")
    try:
        paths = write_tables(
            results_dir, out_dir or results_dir / "tables", only=only.split(",") if only else None, formats=tuple(format.split(",")), metric=metric,
            routing_nf=routing_nf,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    for p in paths:
        if p.suffix == ".md" and only:
            out.print(p.read_text(encoding="utf-8"), markup=False, highlight=False)
    figs = write_figure2(results_dir, note_no_probe=False) if not only else None
    shown = f"; figure(s) {', '.join(str(p) for p in figs.paths)}" if figs and figs.paths else ""
    out.print(f"wrote {len(paths)} files under {(out_dir or results_dir / 'tables')}{shown}", soft_wrap=True)
    for note in figs.notes if figs else ():
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    problems = load_results(results_dir).problems
    if problems:
        err.print(f"error: {unreadable_folders(problems)}; the tables were written without them", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def plot(
    results: Optional[Path] = _results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: RESULTS/figures)"),
    format: str = typer.Option("png,pdf", "--format", "-f", help="Comma-separated: png, pdf, svg"),
    metric: str = typer.Option("em", "--metric", help="What the cells show: em (EM as the paper's authors compute it), em_strict, f1, contains"),
) -> None:
    """Draw the figures of a results folder: EM by strategy (95% CIs), cost vs EM, ρ̂1..3 per probe, Figure 2 per benchmark."""
    from madara_cli.tables.plots import write_plots

    try:
        figs = write_plots(_results_dir(results), out_dir, formats=format.split(","), metric=metric)
    except ValueError as e:
        raise UserError(str(e)) from None
    for p in figs.paths:
        out.print(str(p), markup=False, highlight=False, soft_wrap=True)
    for note in figs.notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(
    results: Optional[Path] = _results_option(),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write index.html (default: RESULTS/report)"),
    metric: str = typer.Option("em", "--metric", help="What our cells show: em (EM as the paper's authors compute it), em_strict, f1, contains"),
    open_page: bool = typer.Option(False, "--open", help="Open the page in the web browser"),
) -> None:
    """Write one self-contained HTML page of a results folder: figures, routing decisions, every paper table, cell provenance."""
    from madara_cli.results.stored import load_results
    from madara_cli.tables.report import write_report

    results_dir = _results_dir(results)
    try:
        page = write_report(results_dir, out_dir, metric=metric)
    except ValueError as e:
        raise UserError(str(e)) from None
    for note in page.notes:
        err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"wrote {page.path} ({page.tables} tables, {page.figures} figures)", markup=False, highlight=False, soft_wrap=True)
    if open_page:
        import webbrowser

        if not webbrowser.open(page.path.resolve().as_uri()):
            err.print(f"note: no web browser found here; open {page.path.resolve().as_uri()} yourself", markup=False, highlight=False, soft_wrap=True)
    problems = load_results(results_dir).problems
    if problems:
        err.print(f"error: {unreadable_folders(problems)}; the report was written without them", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


# Named in full up to this many; beyond, a count and the first few.
SHOWN_PROBLEMS = 5


def unreadable_folders(problems) -> str:
    """One line naming the result folders that cannot be read and why, all of them or a
    count and the first :data:`SHOWN_PROBLEMS`, with what to do."""
    shown = "; ".join(f"{folder} ({why})" for folder, why in problems[:SHOWN_PROBLEMS])
    more = (f"; and {len(problems) - SHOWN_PROBLEMS} more (madara show FOLDER says what is wrong with each)"
            if len(problems) > SHOWN_PROBLEMS else "")
    return (f"{len(problems)} result folder(s) hold results that cannot be read: {shown}{more}; "
            "rerun those cells with force=true, or delete the folders")


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="A finished cell folder (results/<grid>/<key>)"),
    run_b: Path = typer.Argument(..., help="Another finished cell folder"),
    resamples: int = typer.Option(10_000, "--resamples", min=1, help="Paired bootstrap resamples"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object"),
    min_pairs: int = typer.Option(10, "--min-pairs", min=1, help="Fewest shared examples for which a bootstrap CI is shown (below it: the exact McNemar test only)"),
) -> None:
    """Paired comparison of two cells on their shared examples: EM, b, c, McNemar, bootstrap CI.
    Cells of different benchmarks or questions, or with an id twice, are refused."""
    from madara_cli.tables import compare_cells, format_comparison

    try:
        result = compare_cells(run_a, run_b, n_resamples=resamples, seed=seed, min_pairs=min_pairs)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        import json

        print(json.dumps(result, indent=2, allow_nan=False))
        return
    out.print(format_comparison(result), markup=False, highlight=False)


@app.command()
def audit(
    only: Optional[str] = typer.Option(None, "--only", help="Show only 'match', 'discrepancy' or 'not derivable' rows"),
    policies: bool = typer.Option(False, "--policies", help="Also route every published pair by the paper's, NF-only and madara's isolation policy"),
) -> None:
    """Recompute every number the paper derives from its other published numbers."""
    from madara_cli.audit import format_audit, run_audit

    out.print(format_audit(run_audit(), only=only), markup=False, highlight=False)
    if policies:
        from madara_cli.audit.policies import compare_policies, comparison_markdown

        out.print("\n## Routing policies on the published numbers (madara's extension, README \"Beyond the paper\")\n", markup=False)
        out.print(comparison_markdown(compare_policies()), markup=False, highlight=False)


@app.command()
def reproduce(
    backend: str = typer.Option("vllm", "--backend", help="vllm (the paper's setting) | llamacpp (CPU) | openai"),
    models: str = typer.Option("llama-3.1-8b,mistral-7b,qwen3-8b,qwen2.5-7b,gemma-2-9b", "--models", help="Comma-separated model configs (replaces each grid's model axis)"),
    grids: Optional[str] = typer.Option(None, "--grids", help="Space- or comma-separated grids (default: every paper grid)"),
    results: Optional[Path] = _results_option(),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides for every cell, e.g. benchmark.path=FILE"),
) -> None:
    """Every paper grid, then all tables, Figure 2 and the audit; exits 1 when any cell or probe was skipped."""
    from madara_cli.config import paper_grids
    from madara_cli.experiment.reproduce import reproduce as run_all
    from madara_cli.progress import StageProgress

    overrides = list(overrides or [])
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "results_dir"]
    results_dir = given[-1] if given else str(_results_dir(results))
    overrides = [o for o in overrides if o.split("=", 1)[0] != "results_dir"]
    names = [g for g in grids.replace(",", " ").split() if g] if grids else paper_grids()
    with StageProgress(err) as progress:
        report = run_all(backend, [m for m in models.replace(" ", ",").split(",") if m], names, results_dir, progress, overrides)
    out.print(f"finished cells and probes: {report.finished}; skipped: {len(report.failed)}")
    for f in report.failed:
        out.print(f"  skipped {f.label}: {f.reason}", markup=False, highlight=False)
    out.print(f"tables: {len(report.tables)} files under {results_dir}/tables" + (f"; figure: {report.figure}" if report.figure else ""))
    out.print(report.audit, markup=False, highlight=False)
    if report.failed:
        err.print(f"reproduce incomplete: {len(report.failed)} cell(s)/probe(s) skipped: " + "; ".join(f.label for f in report.failed),
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def show(
    cell: str = typer.Argument(..., help="A finished cell or probe folder, or its key (a unique part of it is enough)"),
    results: Optional[Path] = _results_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the cell's or probe's record as JSON"),
) -> None:
    """A finished cell's metrics with its provenance: versions, commit, overrides, times, host."""
    import json

    from madara_cli.results.record_files import find_cell, flat_items, read_record

    try:
        folder = find_cell(_results_dir(results), cell)
        fname, typed = read_record(folder)
    except ValueError as e:
        raise UserError(str(e)) from None
    record = typed.to_dict()
    if as_json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return
    prov = typed.provenance or {}
    t = Table(title=f"{folder.name} ({fname})", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value", overflow="fold")
    skip = {"provenance", "scores", "per_query", "bootstrap"}
    for k, v in flat_items({k: v for k, v in record.items() if k not in skip}):
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values]"
        t.add_row(k, "" if v is None else str(v))
    out.print(t)
    if not prov:
        out.print("[yellow]no provenance recorded[/yellow] (written by a madara older than 0.2)")
    else:
        p = Table(title="provenance", show_header=False)
        p.add_column("key", style="bold")
        p.add_column("value", overflow="fold")
        for k in ("madara_version", "git_commit", "git_dirty", "python", "platform", "host", "started", "ended", "seconds"):
            p.add_row(k, str(prov.get(k)))
        engine = prov.get("engine") or {}
        p.add_row("engine", f"{engine.get('backend')} ({engine.get('package') or '-'} {engine.get('version') or ''})".strip())
        p.add_row("overrides", " ".join(prov.get("overrides") or []) or "(none)")
        p.add_row("command", "madara " + " ".join(prov.get("argv") or []))
        p.add_row("packages", ", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items()))
        out.print(p)
    out.print(f"[dim]{folder}[/dim]")


@app.command()
def bench(
    only: str = typer.Option("calls,overhead,scoring,stats,stages", "--only", help="Sections: calls, overhead, scoring, stats, stages, threads"),
    limit: int = typer.Option(2, "--limit", min=1, help="calls: queries per cell of the plan (needs no model)"),
    stage_limit: int = typer.Option(1, "--stage-limit", min=1, help="stages: queries per cell"),
    prompts: int = typer.Option(4, "--prompts", min=1, help="overhead: prompts"),
    questions: int = typer.Option(1, "--questions", min=1, help="scoring: questions"),
    docs: int = typer.Option(4, "--docs", min=1, help="scoring: documents per question (3 agents each)"),
    n_threads: Optional[int] = typer.Option(1, "--threads", min=1, help="llama.cpp threads for the model sections"),
    out_dir: Path = typer.Option(Path("results/bench"), "--out", help="Where the JSON files go"),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, e.g. model=qwen3-0.6b"),
) -> None:
    """Measure, side by side in one run: call economy, orchestration overhead, scoring cost, statistics, stage times."""
    from madara_cli.bench import BenchOptions, run_bench, summary_rows

    opts = BenchOptions(limit=limit, stage_limit=stage_limit, prompts=prompts, score_questions=questions, score_docs=docs, n_threads=n_threads,
                        overrides=list(overrides or []), out_dir=out_dir)
    results = run_bench(opts, tuple(x for x in only.split(",") if x), say=lambda m: err.print(m, style="dim"))
    t = Table(title="madara bench (ratios measured side by side in one run)")
    for col in ("section", "measure", "ratio"):
        t.add_column(col, justify="right" if col == "ratio" else "left")
    for row in summary_rows(results):
        t.add_row(*row)
    out.print(t)
    out.print(f"[dim]{out_dir}/*.json[/dim]")


index_app = typer.Typer(help="Retrieval indexes.", no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("build")
def index_build(
    corpus: Path = typer.Option(..., "--corpus", help="JSONL corpus: id + title/text, or FlashRAG's contents"),
    out_dir: Path = typer.Option(Path("results/indexes"), "--out", help="Parent folder of the index"),
    engine: Optional[str] = typer.Option(None, "--engine", help="bm25s | dense | pyserini (Lucene); same as retriever=NAME"),
    overrides: Optional[List[str]] = typer.Argument(None, help="retriever=bm25s|dense|pyserini and its settings, e.g. retriever.k1=0.9"),
) -> None:
    """Build (or find) a saved index of CORPUS; use it with retriever.index=DIR."""
    from madara_cli.config import compose
    from madara_cli.data.saved_index import build_index

    cfg = compose(([f"retriever={engine}"] if engine else []) + list(overrides or []))
    path = build_index(corpus, out_dir, cfg.retriever, progress=True)
    out.print(f"index ready: {path}\nuse it with: retriever={cfg.retriever.name} retriever.index={path}")


RESUME_HINT = "finished cells and cached completions are kept; rerun the same command to resume"


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a command (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame) -> None:
    raise Interrupted(signum)


cache_app = typer.Typer(help="The response cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("merge")
def cache_merge(
    cache: Path = typer.Option(Path("results/cache.sqlite"), "--cache", help="The cache; its shards are in CACHE-shards/"),
    keep: bool = typer.Option(False, "--keep", help="Keep the shards after merging"),
) -> None:
    """Fold the per-worker cache shards of cluster jobs into the cache (idempotent)."""
    from madara_cli.backends.shards import merge_shards, shard_dir

    if not cache.is_file() and not shard_dir(cache).is_dir():  # a typo would otherwise "merge 0 shards" and succeed
        raise UserError(f"no response cache {cache} and no shards in {shard_dir(cache)}: nothing to merge "
                        "(pass --cache RESULTS/cache.sqlite of the sweep)")
    r = merge_shards(cache, keep=keep)
    out.print(f"merged {r.shards} shards from {shard_dir(cache)}: {r.rows} entries, {r.added} new to {cache}", markup=False, highlight=False)
    if r.failed:
        raise UserError("shards not merged (kept): " + "; ".join(r.failed))


def main() -> None:
    """Entry point: one clear line instead of a traceback for anything a user can fix."""
    from madara_cli.errors import BackendError, ConfigError, DataError

    try:  # typer >= 0.20 vendors click; older ones use it directly
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        from click import exceptions as cx

    # typer turns KeyboardInterrupt into a silent exit 130 before it reaches us, so
    # SIGINT (and SIGTERM) raise an exception of our own that passes through it (and
    # through every `except Exception`), unwinding the finally blocks that close the
    # engine and the cache.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        rv = app(standalone_mode=False, prog_name="madara")  # also under python -m madara_cli.cli (completion scripts name it)
    except Interrupted as e:
        err.print(f"{'interrupted' if e.signum == signal.SIGINT else 'terminated'}: {RESUME_HINT}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(128 + e.signum)
    except cx.NoSuchOption as e:
        hint = _override_for_option(e.option_name, sys.argv[1:])
        if hint:
            err.print(f"error: no such option {e.option_name}: madara takes settings as overrides; write {hint}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        cmd = e.ctx.command if e.ctx else None
        valid = sorted(o for p in (cmd.params if cmd else []) for o in p.opts if o.startswith("-")) + ["--help"]
        err.print(f"error: no such option {e.option_name}; valid options: {', '.join(valid)}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except cx.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            err.print(e.format_message(), highlight=False, soft_wrap=True)
            sys.exit(0)
        hint = ""
        if "No such command" in e.format_message():
            hint = "; valid commands: " + ", ".join(sorted(app_commands()))
        err.print(f"error: {e.format_message()}{hint}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        err.print(f"interrupted: {RESUME_HINT}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(130)
    except (UserError, ConfigError, DataError, BackendError) as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except OSError as e:  # a folder that cannot be written, a full disk: one line, finished work stays
        err.print(f"error: {_os_error_line(e)} (finished cells and cached completions are kept)", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)


def _os_error_line(e: OSError) -> str:
    import errno

    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        where = e.filename or "the device"
        return f"no space left on {where} ({e.strerror or e}); free some space and rerun"
    if e.filename:
        return f"cannot use {e.filename}: {e.strerror or e}"
    return str(e)


# Options of other evaluation runners (lm-evaluation-harness and friends) -> the override
# that does the same here. A value-less flag gets the value shown.
_OPTION_OVERRIDES = {
    "limit": "limit", "seed": "seed", "output_path": "results_dir", "output": "results_dir", "output_dir": "results_dir",
    "batch_size": "backend.batch_size", "log_samples": "log_samples", "model": "model", "tasks": "benchmark",
    "task": "benchmark", "benchmark": "benchmark", "strategy": "strategy", "device": "backend", "force": "force",
}
_FLAGS = {"log_samples": "true", "force": "true"}


def _override_for_option(option: str, argv: list[str]) -> str | None:
    """``--limit 2`` -> ``limit=2`` (and the rest of the table above), reading the value
    the user gave after the option; None for an option with no counterpart."""
    name = option.lstrip("-").replace("-", "_")
    key = _OPTION_OVERRIDES.get(name)
    if key is None:
        return None
    value = _FLAGS.get(name)
    for i, arg in enumerate(argv):
        if arg == option and name not in _FLAGS and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    if key == "backend" and value not in (None, "llamacpp", "vllm", "openai"):
        return "backend=llamacpp (CPU) or backend=vllm (GPU)"
    return f"{key}={value if value is not None else '...'}"


def app_commands() -> list[str]:
    return [c.name or c.callback.__name__ for c in app.registered_commands]


if __name__ == "__main__":
    main()
