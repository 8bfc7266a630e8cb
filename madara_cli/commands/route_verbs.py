"""``madara route`` and ``madara audit``: routing from diagnostics alone, the paper checked against its own numbers."""

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
    """A line per published pair (within 100 columns), then the rule deciding each route (the reason's last clause)."""
    from madara_cli import paper as pv
    from madara_cli.audit import published_diagnostics
    from madara_cli.diagnose import router

    t = Table(title="router.route on the paper's published diagnostics", title_justify="left", box=None, pad_edge=False,
              padding=(0, 1), header_style="bold")
    for col in ("model", "task", "NF %", "ρ̂1 ρ̂2 ρ̂3", "class", "route", "paper (Table 2)"):
        t.add_column(col, overflow="fold")
    agree = total = 0
    why = []
    for (model, benchmark), diag in published_diagnostics(triviaqa=True).items():
        decision = router.route(diag, thresholds)
        paper = pv.TABLE2.get((model, benchmark, "strategy"))
        if paper:
            total += 1
            agree += paper == decision.strategy
        rho = " ".join(f"{r:.2f}" for r in diag.rho) if diag.rho else "—"
        t.add_row(model, benchmark, f"{diag.em_nf:g}", rho, str(diag.rsc_class), decision.strategy, paper or "n/a")
        why.append(f"{model} × {benchmark}: {decision.reason.rsplit('; ', 1)[-1]}")
    out.print(t)
    out.print(f"{agree}/{total} of Table 2's routes reproduced; why each route (the rule that decided it):")
    for line in why:
        out.print(f"  {line}", markup=False, highlight=False)


def route(
    nf: Optional[float] = typer.Option(None, "--nf", help="No-Filter EM on the calibration set, in percent (45, not 0.45: a fraction is refused)"),
    rho: Optional[Tuple[float, float, float]] = typer.Option(None, "--rho", help="rho_1 rho_2 rho_3 (shuffled, contradicted, random)"),
    degenerate: bool = typer.Option(False, "--degenerate", help="The probe's scores were degenerate (no rho): instead of --rho"),
    rsc_class: Optional[str] = typer.Option(None, "--class", help="quality-ordered | stochastic | degenerate (derived from --rho when omitted)"),
    entropy: Optional[float] = typer.Option(None, "--entropy", min=0.0, max=1.0, help="normalised score entropy (for the entropy policy)"),
    tau_nf: float = typer.Option(30.0, "--tau-nf", min=0.0, max=100.0, help="NF threshold (percent)"),
    rho1: float = typer.Option(0.5, "--rho1", min=-1.0, max=1.0, help="rho_1 threshold between weak and strong coupling"),
    published: bool = typer.Option(False, "--published", help="Route the paper's own diagnostics (Table 2's ten pairs + D.2's two TriviaQA cells)"),
    policy: str = typer.Option("paper", "--policy", help="paper (Algorithm 2) | isolation (madara's: the NF gate informed by the isolation gain)"),
    iso_em: Optional[float] = typer.Option(None, "--iso-em", help="isolation policy: PDE-Random EM in percent on the same queries as --nf"),
    iso_n: Optional[int] = typer.Option(None, "--iso-n", min=1, help="isolation policy: how many queries --nf and --iso-em were measured on"),
) -> None:
    """What MADARA would route to, and why, from diagnostics alone (runs nothing): --nf PERCENT with --rho R1 R2 R3 or --degenerate."""
    from madara_cli import api
    from madara_cli.diagnose import router

    if policy not in router.POLICIES:
        raise UserError(f"--policy {policy!r} is not a routing policy; valid: {', '.join(router.POLICIES)}")
    if published:
        thresholds = router.Thresholds(tau_nf=tau_nf, rho1=rho1)
        if policy == router.ISOLATION:
            _compare_policies_published(thresholds)
        else:
            _route_published(thresholds)
        return
    if nf is None:
        raise UserError("route needs --nf PERCENT and --rho R1 R2 R3 (or --degenerate for degenerate scores), or --published")
    if rho is None and not degenerate:  # a missing --rho is no longer read as "degenerate": that is said explicitly
        raise UserError("route needs the probe's --rho R1 R2 R3, or --degenerate for a probe whose scores were degenerate (no ρ̂)")
    if rho is not None and degenerate:
        raise UserError("--rho and --degenerate contradict each other: a degenerate probe measured no ρ̂; give one of them")
    try:
        routed = api.route(nf, rho, degenerate=degenerate, rsc_class=rsc_class, entropy=entropy, tau_nf=tau_nf, rho1=rho1, policy=policy,
                           iso_em=iso_em, iso_n=iso_n)
    except ValueError as e:
        raise UserError(_as_options(str(e))) from None
    if routed.iso_note:
        out.print(routed.iso_note, style="yellow")
    out.print(styled("[bold]route:[/bold] {}", routed.strategy), markup=True)
    out.print(styled("[bold]reason:[/bold] {}", routed.reason), markup=True)
    out.print(f"NF-only policy: {routed.nf_only}" + (f"; entropy policy: {routed.by_entropy}" if routed.by_entropy else ""), style="dim")


def _as_options(message: str) -> str:
    """The API's message in the command line's words: --nf 45 for nf=45."""
    import re

    return re.sub(r"\bnf=(\S+?)([ )]|$)", r"--nf \1\2", message).replace("rho is three", "--rho is three")


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
