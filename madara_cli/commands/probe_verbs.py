"""``madara probe``: diagnose a model-task pair, and the probe record as a table."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from madara_cli.commands.options import (
    UserError,
    config_dir_option,
    err,
    honoured,
    include_option,
    out,
    results_option,
    styled,
    use_folders,
    with_results,
)


def probe(
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, as for run: model=M benchmark=B backend=vllm benchmark.path=FILE"),
    model: Optional[str] = typer.Option(None, "--model", help="Model config name (madara ls models); the same as model=M (default smollm2-135m)"),
    benchmark: Optional[str] = typer.Option(None, "--benchmark", "-b", help="Benchmark config name; the same as benchmark=B (default mini)"),
    n: Optional[int] = typer.Option(None, "--n", min=1, help="Calibration queries (default: benchmark.calibration, 100 for the paper's benchmarks)"),
    force: bool = typer.Option(False, "--force", help="Recompute even if a finished probe exists (completions still come from the cache)"),
    results: Optional[Path] = results_option(),
    config_dir: Optional[List[Path]] = config_dir_option(),
    include: Optional[List[Path]] = include_option(),
) -> None:
    """Diagnose a model-task pair: NF baseline + RSC probe -> route; writes results/probes/<key>/.
    Takes model= and benchmark= like run (--model and --benchmark say the same)."""
    use_folders(config_dir, include)
    from madara_cli import api
    from madara_cli.core.progress import StageProgress

    with StageProgress(err) as progress:
        try:
            done = api.probe(with_results(honoured(list(overrides or [])), results), model=model, benchmark=benchmark, n=n, force=force,
                             progress=progress)
        except ValueError as e:  # a bad --n for this benchmark, and the config's own errors: one line
            raise UserError(str(e)) from None
    print_probe(done.record, done.path, done.reused)


def print_probe(r, path: Path, reused: bool) -> None:
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
        f"ρ* = {f(r.rho_star)}   ρ̄ = {f(r.rho_bar)}   class: {r.rsc_class}"
        f"   coupling: {r.coupling or '—'}   bootstrap stability: {f(r.stability, '{:.0%}')}"
    )
    if r.is_degenerate:
        deg = r.degenerate
        out.print(f"degenerate scoring: floor {f(deg.floor_share, '{:.0%}')}, ceiling {f(deg.ceiling_share, '{:.0%}')}, "
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
    out.print(styled("[bold]route:[/bold] {} — {}", r.route, r.reason), markup=True)
    if iso is not None and iso.route:
        out.print(styled("[bold]route (router.policy=isolation):[/bold] {} — {}", iso.route, iso.reason), markup=True)
    out.print(str(path), style="dim")
