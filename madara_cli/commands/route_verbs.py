"""``madara route`` and ``madara audit``: routing from diagnostics alone, and the
paper checked against its own published numbers (neither runs a model)."""

from __future__ import annotations

from typing import Optional, Tuple

import typer
from rich.table import Table

from madara_cli.commands.options import UserError, out, styled


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
    out.print("† routed treatment's EM not printed: the gap if it scored like the worst / best printed scoring treatment. "
              "Δ_iso from printed EMs: p is the least significant exact McNemar any pairing allows; PDE stands in where only PDE is printed.", style="dim")


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


def route(
    nf: Optional[float] = typer.Option(None, "--nf", help="No-Filter EM on the calibration set, in percent"),
    rho: Optional[Tuple[float, float, float]] = typer.Option(None, "--rho", help="rho_1 rho_2 rho_3 (shuffled, contradicted, random); omit for degenerate scoring"),
    rsc_class: Optional[str] = typer.Option(None, "--class", help="quality-ordered | stochastic | degenerate (derived from --rho when omitted)"),
    entropy: Optional[float] = typer.Option(None, "--entropy", min=0.0, max=1.0, help="normalised score entropy (for the entropy policy)"),
    tau_nf: float = typer.Option(30.0, "--tau-nf", min=0.0, max=100.0, help="NF threshold (percent)"),
    rho1: float = typer.Option(0.5, "--rho1", min=-1.0, max=1.0, help="rho_1 threshold between weak and strong coupling"),
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
        out.print("no --iso-em/--iso-n: the isolation policy has no measurement and routes as the paper's", style="yellow")
    try:
        decision = router.route_policy(policy, diag, iso, thresholds)
    except ValueError as e:
        raise UserError(str(e)) from None
    out.print(styled("[bold]route:[/bold] {}", decision.strategy), markup=True)
    out.print(styled("[bold]reason:[/bold] {}", decision.reason), markup=True)
    nf_only = router.route_nf_only(diag, tau_nf)
    out.print(f"NF-only policy: {nf_only.strategy}" + (f"; entropy policy: {router.route_entropy(diag).strategy}" if entropy is not None else ""), style="dim")


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
