"""Routing policies compared on the paper's own numbers (docs/isolation.md): the paper's
(Algorithm 2), NF-only (Table 19) and madara's isolation policy (:func:`router.route_isolation`).

Every pair with a printed NF EM and isolation EM is routed three ways and scored by its
oracle gap (best printed EM of the pair minus the routed strategy's), as Table 19 does:
Table 2's ten pairs (CONFLICTS with Table 1's PDE-Random, or Table 15's PDE as a stand-in;
FEVER has no isolation EM, so every policy there is the paper's rule); BM25 TriviaQA
(Table 1, n ≈ 1,000, §5.1); MuSiQue (Table 6, App. J; n = 100); the extended models
(Table 15) and dense TriviaQA (Table 16, N = 500), PDE standing in. ρ̂ are Table 4's (§6.5 /
App. J's for MuSiQue); Table 4 probed BM25, so the dense and extended pairs' scoring arm is
shown as ``scoring`` and, with no printed EM, has no gap. Significance from printed EMs is
:func:`router.least_significant_mcnemar` (no pairing can make it less significant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from madara_cli import paper as pv
from madara_cli.audit.published import printed_ems, published_diagnostics
from madara_cli.diagnose import router

POLICIES = ("paper", "nf_only", "isolation")
POLICY_LABELS = {"paper": "paper (Alg. 2)", "nf_only": "NF-only", "isolation": "isolation (madara)"}
SCORING = ("three_agent", "cot", "sda", "sda_cot", "atf")
SCORING_ARM = "scoring"  # the scoring arm of a pair whose ρ̂ the paper does not print
N_TRIVIAQA_BM25 = 1000  # §5.1: "sampled subsets (~1K queries)"


@dataclass(frozen=True)
class PublishedPair:
    """One model-task(-retrieval) pair as the paper prints it."""

    model: str
    benchmark: str
    setting: str  # where the numbers come from, e.g. "Table 1 (BM25)"
    em_nf: float
    iso: router.Isolation | None
    diag: router.Diagnostics | None  # None: ρ̂ not published for this pair
    ems: dict[str, float] = field(hash=False)

    @property
    def name(self) -> str:
        return f"{self.model} / {self.benchmark} ({self.setting})"


@dataclass(frozen=True)
class PolicyRow:
    pair: PublishedPair
    routes: dict[str, str]
    reasons: dict[str, str]
    oracle: tuple[str, float]
    gaps: dict[str, float | None]
    bounds: dict[str, tuple[float, float] | None]  # gap range when the routed scoring EM is not printed


def published_pairs() -> list[PublishedPair]:
    """Every pair with a printed NF and isolation EM (module docstring), Table 2's ten first."""
    pairs: list[PublishedPair] = []
    iso = router.Isolation.from_published
    diags = published_diagnostics(triviaqa=True)
    for model, benchmark in pv.ROUTING_PAIRS:
        ems = printed_ems(model, benchmark)
        nf = pv.TABLE2[(model, benchmark, "nf")]
        measured = None
        if (model, benchmark, "pde_random") in pv.TABLE1:
            ems.setdefault("pde_random", pv.TABLE1[(model, benchmark, "pde_random")])
            measured = iso(nf, ems["pde_random"], pv.N_CONFLICTS, "Table 1, PDE-Random")
        elif (model, benchmark, "pde") in pv.TABLE15:
            measured = iso(nf, pv.TABLE15[(model, benchmark, "pde")], pv.N_CONFLICTS, "Table 15, PDE as stand-in")
        pairs.append(PublishedPair(model, benchmark, "Table 2", nf, measured, diags[(model, benchmark)], ems))
    for model in ("llama-3.1-8b", "mistral-7b"):
        ems = {s: pv.TABLE1[(model, "triviaqa", s)] for s in pv.TABLE1_COLUMNS}
        pairs.append(PublishedPair(model, "triviaqa", "Table 1, BM25", ems["nf"], iso(ems["nf"], ems["pde_random"], N_TRIVIAQA_BM25, "Table 1, PDE-Random"),
                                   diags[(model, "triviaqa")], ems))
    qwen = {s: v[0] for (m, b, s), v in pv.TABLE6.items()}
    mistral = {s: v for s, v in pv.MUSIQUE_MISTRAL.items() if s not in ("rho", "rho_star")}
    for model, setting, ems, rho in (("qwen2.5-7b", "Table 6", qwen, pv.MUSIQUE_QWEN_RHO), ("mistral-7b", "App. J", mistral, pv.MUSIQUE_MISTRAL["rho"])):
        pairs.append(PublishedPair(model, "musique", setting, ems["nf"], iso(ems["nf"], ems["pde_random"], pv.N_MUSIQUE, f"{setting}, PDE-Random"),
                                   router.Diagnostics(ems["nf"], rho), ems))
    for models, benchmark, table, name, setting, n in (
        (pv.TABLE15_EXTENDED, "conflicts", pv.TABLE15, "Table 15", "Table 15", pv.N_CONFLICTS),
        (pv.CORE_MODELS, "triviaqa", pv.TABLE16, "Table 16", "Table 16, dense", pv.N_TRIVIAQA_DENSE),
    ):
        for model in models:
            ems = {s: table[(model, benchmark, s)] for s in ("nf", "pde")}
            pairs.append(PublishedPair(model, benchmark, setting, ems["nf"], iso(ems["nf"], ems["pde"], n, f"{name}, PDE as stand-in"), None, ems))
    return pairs


def _route(policy: str, pair: PublishedPair, thresholds: router.Thresholds) -> router.Route:
    diag = pair.diag
    if policy == "nf_only":
        return router.route_nf_only(diag or router.Diagnostics(pair.em_nf, None), thresholds.tau_nf)
    if diag is not None:
        return router.route_policy(policy, diag, pair.iso, thresholds)
    # No published ρ̂: the policies still decide isolate-or-score; the arm is unnamed.
    if policy == "isolation" and pair.iso is not None:
        isolate, why = router.isolates(pair.em_nf, pair.iso, thresholds)
    else:
        isolate = pair.em_nf < thresholds.tau_nf
        why = f"NF EM {pair.em_nf:g}% {'<' if isolate else '≥'} τ_NF {thresholds.tau_nf:g}%"
    return router.Route(router.PDE, f"{why} → PDE") if isolate else router.Route(SCORING_ARM, f"{why} → scoring arm (ρ̂ not published for this pair)")


def compare_policies(thresholds: router.Thresholds = router.DEFAULT_THRESHOLDS) -> list[PolicyRow]:
    """Each published pair routed by every policy, with its oracle gap (EM points)."""
    rows = []
    for pair in published_pairs():
        oracle = max(pair.ems.items(), key=lambda kv: kv[1])
        scoring = [pair.ems[s] for s in SCORING if s in pair.ems]
        routes, reasons, gaps, bounds = {}, {}, {}, {}
        for policy in POLICIES:
            r = _route(policy, pair, thresholds)
            routes[policy], reasons[policy] = r.strategy, r.reason
            em = pair.ems.get(r.strategy)
            gaps[policy] = None if em is None else round(oracle[1] - em, 4)
            bounds[policy] = (
                (round(oracle[1] - max(scoring), 4), round(oracle[1] - min(scoring), 4))
                if em is None and scoring and (r.strategy in SCORING or r.strategy == SCORING_ARM)
                else None
            )
        rows.append(PolicyRow(pair, routes, reasons, oracle, gaps, bounds))
    return rows


def mean_gaps(rows: list[PolicyRow]) -> tuple[dict[str, float], int]:
    """Each policy's mean oracle gap over the pairs where every policy's route has a printed EM, and how many."""
    common = [r for r in rows if all(g is not None for g in r.gaps.values())]
    means = {p: (sum(r.gaps[p] for r in common) / len(common)) if common else float("nan") for p in POLICIES}  # type: ignore[misc]
    return means, len(common)


def where_they_differ(rows: list[PolicyRow]) -> str:
    """The pairs the isolation policy routes differently from the paper's, with both gaps."""
    parts = [f"{r.pair.name}: paper {r.routes['paper']} gap {format_gap(r, 'paper')}, isolation {r.routes['isolation']} gap {format_gap(r, 'isolation')}"
             for r in rows if r.routes["isolation"] != r.routes["paper"]]
    return "; ".join(parts) or "none"


def format_gap(row: PolicyRow, policy: str) -> str:
    gap, bound = row.gaps[policy], row.bounds[policy]
    if gap is not None:
        return f"{gap:.1f}"
    if bound is not None:
        return f"[{bound[0]:.1f}, {bound[1]:.1f}]†"
    return "—"


def comparison_markdown(rows: list[PolicyRow]) -> str:
    """The comparison as a Markdown table with its notes (``madara route --published --policy isolation``, ``madara audit``)."""
    head = ["pair", "NF", "Δ_iso (p)", *(f"{POLICY_LABELS[p]} route" for p in POLICIES), "oracle", *(f"gap {POLICY_LABELS[p]}" for p in POLICIES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        iso = "—" if r.pair.iso is None else f"{r.pair.iso.gain:+.1f} ({r.pair.iso.p_value:.2g})"
        cells = [r.pair.name, f"{r.pair.em_nf:g}", iso, *(r.routes[p] for p in POLICIES), f"{r.oracle[0]} {r.oracle[1]:g}", *(format_gap(r, p) for p in POLICIES)]
        lines.append("| " + " | ".join(cells) + " |")
    means, n = mean_gaps(rows)
    lines.append("")
    lines.append(f"Mean oracle gap over the {n} pairs where every route has a printed EM: " + ", ".join(f"{POLICY_LABELS[p]} {means[p]:.2f}" for p in POLICIES) + " pt.")
    lines.append(f"Where the isolation policy differs from the paper's: {where_they_differ(rows)}.")
    lines.append("† the routed treatment's EM is not printed: the range is the gap if it scored like the worst / best printed scoring treatment of the pair.")
    lines.append("Δ_iso from printed EMs: p is the least significant exact McNemar p-value any pairing of the queries allows; PDE stands in for PDE-Random where only PDE is printed.")
    return "\n".join(lines)
