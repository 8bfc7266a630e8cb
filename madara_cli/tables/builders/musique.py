"""MuSiQue multi-hop: EM, F1 and the 3-Agent bootstrap (Table 6), chain coverage
(Table 17) and supporting paragraphs by hop count (Appendix J)."""

from __future__ import annotations

import numpy as np

from madara_cli import paper as pv
from madara_cli.core import stats
from madara_cli.tables.builders.common import benchmark_label, minus, model_label, percent, strategy_label, table_pairs
from madara_cli.tables.compare import paired_outcomes
from madara_cli.tables.declare import Built, table
from madara_cli.tables.lookup import Results, hop_count, support_in_topk
from madara_cli.tables.pairs import MISSING, pair


@table("table6", "Table 6: MuSiQue results (Qwen2.5-7B, 100 queries)", grid="table6")
def table6(res: Results, grid: str) -> Built:
    """Table 6: MuSiQue (Qwen2.5-7B, 100 queries) EM, F1 and ΔEM vs NF, plus the 3-Agent bootstrap CI."""
    model, benchmark = "qwen2.5-7b", "musique"
    nf_cell = res.find(model, benchmark, "nf", grid)
    nf_em = percent(nf_cell)
    rows = []
    for (_, _, strategy), (em, f1, delta) in pv.TABLE6.items():
        cell = res.find(model, benchmark, strategy, grid)
        ours_em = percent(cell)
        ours_f1 = None if cell is None or cell.f1 is None else 100 * cell.f1
        ours_delta = minus(ours_em, nf_em) if strategy != "nf" else None
        rows.append({"Method": strategy_label(strategy), "EM (%)": pair(ours_em, em), "F1 (%)": pair(ours_f1, f1),
                     "Δ EM": pair(ours_delta, delta, signed=True) if strategy != "nf" else "–"})
    b = pv.TABLE6_BOOTSTRAP
    paper_ci = f"{b['diff']:+.1f}pp, 95% CI [{b['ci'][0]:+.1f}, {b['ci'][1]:+.1f}], p = {b['p']}"
    ours_ci = MISSING
    three = res.find(model, benchmark, "three_agent", grid)
    if three is not None and nf_cell is not None and three.predictions() and nf_cell.predictions():
        ids, a, base = paired_outcomes(three.predictions(), nf_cell.predictions())
        if ids:
            boot = stats.paired_bootstrap(a, base, n_resamples=b["n_resamples"], seed=0)
            ours_ci = f"{100 * boot.mean_diff:+.1f}pp, 95% CI [{100 * boot.ci_low:+.1f}, {100 * boot.ci_high:+.1f}], p = {boot.p_value:.3f}"
    notes = [f"3-Agent − NF paired bootstrap ({b['n_resamples']:,} resamples, seed 0): ours {ours_ci} / paper {paper_ci}."]
    return rows, notes


@table("table17", "Table 17: MuSiQue chain-coverage analysis (EM %)", grid="table6")
def table17(res: Results, grid: str) -> Built:
    """Table 17: MuSiQue (Qwen2.5-7B) EM split by whether PDE's top-5 holds the full supporting chain."""
    model, benchmark = "qwen2.5-7b", "musique"
    cells = {s: res.find(model, benchmark, s, grid) for s in ("nf", "three_agent", "pde")}
    preds = {s: cell.predictions() if cell else None for s, cell in cells.items()}
    support: dict[str, tuple[int | None, bool | None]] = {}
    if preds["pde"]:
        support = {str(p["id"]): support_in_topk(p) for p in preds["pde"]}

    def subset_em(strategy: str, ids: set[str] | None) -> tuple[int, float] | None:
        rows_ = preds.get(strategy)
        if not rows_:
            return None
        outcome = cells[strategy].outcome_metric if cells[strategy] else "em"
        chosen = [float(p.get(outcome, 0) or 0) for p in rows_ if ids is None or str(p["id"]) in ids]
        return (len(chosen), 100 * float(np.mean(chosen))) if chosen else None

    complete = {i for i, (_, ok) in support.items() if ok is True}
    broken = {i for i, (_, ok) in support.items() if ok is False}
    have_chain = bool(complete or broken)
    rows = []
    for subset, label, ids in (
        ("all", "All queries", None),
        ("chain_complete", "Chain-complete†", complete),
        ("chain_broken", "Chain-broken‡", broken),
    ):
        n_paper, nf, three, pde = pv.TABLE17[subset]
        usable = ids is None or have_chain
        values = {s: subset_em(s, ids) if usable else None for s in ("nf", "three_agent", "pde")}
        n_ours = values["pde"][0] if values["pde"] else None
        rows.append({"Subset": label, "n": pair(n_ours, n_paper, digits=0), "NF": pair(values["nf"][1] if values["nf"] else None, nf),
                     "3-Agent": pair(values["three_agent"][1] if values["three_agent"] else None, three),
                     "PDE": pair(values["pde"][1] if values["pde"] else None, pde)})
    for count, (pde_paper, three_paper) in pv.TABLE17_BY_SUPPORT.items():
        ids = {i for i, (k, _) in support.items() if k == count}
        values = {s: subset_em(s, ids) if ids else None for s in ("nf", "three_agent", "pde")}
        rows.append({"Subset": f"{count} supporting in top-5", "n": pair(len(ids) if ids else None, None, digits=0),
                     "NF": pair(values["nf"][1] if values["nf"] else None, None),
                     "3-Agent": pair(values["three_agent"][1] if values["three_agent"] else None, three_paper),
                     "PDE": pair(values["pde"][1] if values["pde"] else None, pde_paper)})
    notes = [
        "† PDE's top-5 contains all gold-supporting paragraphs; ‡ top-5 misses at least one. Split read from PDE predictions' `extra.supporting_in_topk` "
        "(count of supporting paragraphs selected; chain length from `extra.n_supporting`, else the MuSiQue id's hop prefix).",
        "The per-count rows come from Appendix J's text.",
    ]
    if preds["pde"] and not have_chain:
        notes.append("The PDE predictions on disk carry no `extra.supporting_in_topk`, so the chain split cannot be computed.")
    return rows, notes


@table("table_j_hops", "Appendix J: supporting paragraphs in PDE's top-5 by hop count (MuSiQue)", grid="table6")
def table_j_hops(res: Results, grid: str) -> Built:
    """Appendix J: share of gold supporting paragraphs in PDE's selected top-5, by hop count (MuSiQue)."""
    rows = []
    for model, benchmark in table_pairs(res, pv.HOP_SUPPORT, ("pde",)):
        paper = pv.HOP_SUPPORT.get((model, benchmark), {})
        cell = res.find(model, benchmark, "pde", grid)
        by_hops: dict[int, list[float]] = {}
        for p in (cell.predictions() if cell else None) or ():
            extra = p.get("extra") or {}
            found, total = extra.get("supporting_in_topk"), extra.get("n_supporting")
            hops = hop_count(p.get("id"))
            if hops is not None and isinstance(found, int) and not isinstance(found, bool) and total:
                by_hops.setdefault(hops, []).append(found / float(total))
        row = {"Model": model_label(model), "Task": benchmark_label(benchmark)}
        for hops in (2, 3, 4):
            values = by_hops.get(hops)
            row[f"{hops}-hop"] = pair(float(np.mean(values)) if values else None, paper.get(hops), digits=2)
            row[f"n {hops}-hop"] = str(len(values)) if values else MISSING
        rows.append(row)
    notes = [
        "Per PDE prediction: gold supporting paragraphs among the selected documents / supporting paragraphs "
        "(`extra.supporting_in_topk`, `extra.n_supporting`), averaged by the hop count in MuSiQue's id. "
        "The paper prints the 2-hop and 4-hop values only (Qwen2.5-7B)."
    ]
    return rows, notes
