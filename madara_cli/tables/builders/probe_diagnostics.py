"""RSC probe diagnostics: per-level ρ̂ and class (Table 4), per-query ρ (Table 10),
split-half and subset stability (Table 11), bootstrap CIs (Table 13)."""

from __future__ import annotations

from functools import partial

from madara_cli import paper as pv
from madara_cli.tables.builders.common import benchmark_label, class_label, model_label, number
from madara_cli.tables.declare import Built, table
from madara_cli.tables.lookup import PROBE_FILE, PROBES_GRID, Results
from madara_cli.tables.pairs import MISSING, fmt, pair, pair_text


@table("table4", "Table 4: RSC diagnostic results", grid=PROBES_GRID)
def table4(res: Results, grid: str) -> Built:
    """Table 4: RSC per-level ρ̂ (Shuffled, Contradicted, Random), trend ρ* and class."""
    rows = []
    # madara's isolation probe (README "Beyond the paper"): a column only when one ran.
    show_iso = any((p := res.probe(m, b)) is not None and p.isolation is not None for m in pv.CORE_MODELS for b in ("conflicts", "fever", "triviaqa"))
    for model in pv.CORE_MODELS:
        for benchmark in ("conflicts", "fever", "triviaqa"):
            probe = res.probe(model, benchmark)
            degenerate = pv.TABLE4_DEGENERATE.get((model, benchmark))
            if (model, benchmark, "rho1") not in pv.TABLE4 and degenerate is None:
                continue
            row = {"Model": model_label(model), "Task": benchmark_label(benchmark)}
            for i, label in enumerate(("Shuffled", "Contra.", "Random")):
                paper = pv.TABLE4.get((model, benchmark, f"rho{i + 1}"))
                row[label] = pair(probe.rho_at(i) if probe else None, paper, digits=2)
            row["Trend (ρ*)"] = pair(number(probe.rho_star) if probe else None, pv.TABLE4.get((model, benchmark, "rho_star")), digits=2)
            ours_class = class_label(probe.rsc_class if probe else None)
            if probe is not None and probe.is_degenerate:
                mean, floor = number(probe.degenerate.mean_score), number(probe.degenerate.floor_share)
                ours_class = f"Degenerate (mean={fmt(mean, 2)}/5.0, {fmt(None if floor is None else 100 * floor, 0)}% floor)"
            if degenerate:
                paper_class = f"Degenerate (mean={degenerate['mean_score']}/5.0, {degenerate['floor_share_pct']}% floor)‡"
            else:
                paper_class = (class_label(pv.TABLE4[(model, benchmark, "rsc_class")]) or "") + (
                    "†" if (model, benchmark) in pv.TABLE4_FOOTNOTES else ""
                )
            row["RSC Class"] = pair_text(ours_class, paper_class)
            if show_iso:
                iso = probe.isolation if probe else None
                row["Δ_iso (ours)"] = MISSING if iso is None or iso.gain is None else f"{fmt(iso.gain, 1, signed=True)} (p={iso.p_value:.2g})"
            rows.append(row)
    notes = list(pv.TABLE4_FOOTNOTES.values()) + ["Ours from results/probes (n = 100 preferred); ρ* = Spearman([1,2,3], ρ̂)."]
    if show_iso:
        notes.append("Δ_iso: madara's isolation probe, EM(PDE-Random) − EM(NF) on the calibration queries, exact McNemar p (not in the paper).")
    return rows, notes


def _mean_std(mean: float | None, std: float | None) -> str:
    return MISSING if mean is None else f"{fmt(mean, 2, signed=True)}±{fmt(std, 2)}"


@table("table10", "Table 10: Per-query Spearman ρ on CONFLICTS (mean ± std)", grid=PROBES_GRID)
def table10(res: Results, grid: str) -> Built:
    """Table 10: per-query Spearman ρ (mean ± std over queries) on CONFLICTS."""
    rows = []
    for model in pv.CORE_MODELS:
        probe = res.probe(model, "conflicts")
        row = {"Model": model_label(model) + ("†" if model == "gemma-2-9b" else ""), "Group (paper)": class_label(pv.TABLE10_GROUPS[model])}
        for i, (column, label) in enumerate(zip(pv.TABLE10_COLUMNS, ("Shuffled", "Contradicted", "Random"), strict=True)):
            paper_mean, paper_std = pv.TABLE10[(model, "conflicts", column)]
            mean, std = probe.per_query_at(i) if probe else (None, None)
            delta = f" ({fmt(round(mean - paper_mean, 4), 2, signed=True)})" if mean is not None else ""
            row[label] = f"{_mean_std(mean, std)} / {_mean_std(paper_mean, paper_std)}{delta}"
        rows.append(row)
    notes = [
        "† Gemma-2: per-query means decrease monotonically but the pooled ρ̂ (Table 4) does not, hence Stochastic.",
        f"Ours: mean ± std of the probe's per-query Spearman ρ ({PROBE_FILE} per_query).",
    ]
    return rows, notes


@table("table11", "Table 11: RSC split-half and 30-query subset stability", grid=PROBES_GRID)
def table11(res: Results, grid: str) -> Built:
    """Table 11: split-half (first/last 50) classes and 30-query subset shares."""
    rows = []
    for model, benchmark in dict.fromkeys((m, b) for (m, b, _) in pv.TABLE11):
        probe = res.probe(model, benchmark)
        halves, subsets = (probe.split_half, probe.subsets30) if probe else (None, None)
        get = partial(pv.lookup, pv.TABLE11, model, benchmark)
        rows.append({"Model": model_label(model), "Task": benchmark_label(benchmark),
                     "First 50": pair_text(class_label(halves.first if halves else None), class_label(get("first_half"))),
                     "Last 50": pair_text(class_label(halves.last if halves else None), class_label(get("last_half"))),
                     "30-query QO (%)": pair(number(subsets.quality_ordered) if subsets else None, get("subsets_quality_ordered_pct"), digits=0),
                     "30-query Stoch. (%)": pair(number(subsets.stochastic) if subsets else None, get("subsets_stochastic_pct"), digits=0)})
    return rows, ["30-query columns: % of 100 random 30-query subsets yielding each class."]


def _ci_text(point: float | None, lo: float | None, hi: float | None) -> str:
    if point is None:
        return MISSING
    ci = f" [{fmt(lo, 2)},{fmt(hi, 2)}]" if lo is not None and hi is not None else ""
    return f"{fmt(point, 2)}{ci}"


@table("table13", "Table 13: Bootstrap 95% CIs on ρ̂_k and classification stability", grid=PROBES_GRID)
def table13(res: Results, grid: str) -> Built:
    """Table 13: bootstrap 95% CIs on ρ̂_k and classification stability."""
    rows = []
    for model, benchmark in pv.ROUTING_PAIRS:
        probe = res.probe(model, benchmark)
        row = {"Model": model_label(model), "Task": benchmark_label(benchmark)}
        for i, label in enumerate(("Shuffled (ρ̂1)", "Contradicted (ρ̂2)", "Random (ρ̂3)")):
            point, lo, hi = pv.TABLE13[(model, benchmark, f"rho{i + 1}")]
            ours = probe.rho_at(i) if probe else None
            ci = (probe.ci_at(i) if probe else None) or (None, None)
            delta = f" ({fmt(round(ours - point, 4), 2, signed=True)})" if ours is not None else ""
            row[label] = f"{_ci_text(ours, number(ci[0]), number(ci[1]))} / {_ci_text(point, lo, hi)}{delta}"
        stability = probe.stability if probe else None
        row["Stability (%)"] = pair(
            None if stability is None else 100 * stability,
            pv.TABLE13[(model, benchmark, "stability")],
            digits=0,
            paper_mark=pv.TABLE13_MARKS.get((model, benchmark), ""),
        )
        rows.append(row)
    notes = [
        f"Paper: {pv.TABLE13_N_RESAMPLES:,} bootstrap resamples over queries. † stability of the stochastic class. "
        "‡ Gemma-2 × CFL: aggregate ρ̂2 ≈ ρ̂3 gives ρ* = −0.50. Some paper CONFLICTS rows are per-query means rather than Table 4's pooled values."
    ]
    return rows, notes
