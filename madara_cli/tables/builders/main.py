"""The paper's main-body EM tables: PDE ablation (1), MADARA routing (2), retriever
quality (5), SDA vs RRF (7) and per-model calibration NF (9)."""

from __future__ import annotations

import numpy as np

from madara_cli import paper as pv
from madara_cli.tables.builders.common import (
    benchmark_label,
    class_label,
    holm_stars,
    madara_outcome,
    mcnemar_pairs,
    mean_of_all,
    minus,
    model_label,
    our_em,
    percent,
    percent_f1,
    routing_nf,
    routing_nf_note,
    strategy_label,
    table_pairs,
)
from madara_cli.tables.declare import Built, table
from madara_cli.tables.lookup import DENSE, PROBES_GRID, RERANK, SPARSE, Results
from madara_cli.tables.pairs import MISSING, pair, pair_text, setting


@table("table1", "Table 1: PDE component ablation (EM %)", grid="table1")
def table1(res: Results, grid: str) -> Built:
    """Table 1: PDE component ablation (EM %), NF / PDE-Random / PDE-Uniform / PDE, with cost multipliers."""
    labels = {"nf": "NF", "pde_random": "Rand.", "pde_uniform": "Unif.", "pde": "Full"}
    rows = []
    ratios: dict[str, list[float]] = {s: [] for s in pv.TABLE1_COLUMNS}
    for model, benchmark in table_pairs(res, ((m, b) for (m, b, _) in pv.TABLE1), pv.TABLE1_COLUMNS):
        row = {"Model": model_label(model), "Task": benchmark_label(benchmark)}
        nf_cell = res.find(model, benchmark, "nf", grid)
        for strategy in pv.TABLE1_COLUMNS:
            row[labels[strategy]] = pair(our_em(res, model, benchmark, strategy, grid), pv.TABLE1.get((model, benchmark, strategy)))
            cell = res.find(model, benchmark, strategy, grid)
            if cell and nf_cell and cell.calls_per_query() and nf_cell.calls_per_query():
                ratios[strategy].append(cell.calls_per_query() / nf_cell.calls_per_query())
        rows.append(row)
    cost = {"Model": "Cost (LLM calls ÷ NF)", "Task": ""}
    for strategy in pv.TABLE1_COLUMNS:
        ours = f"{np.mean(ratios[strategy]):.1f}×" if ratios[strategy] else MISSING
        cost[labels[strategy]] = f"{ours} / {pv.TABLE1_COST[strategy]}"
    rows.append(cost)
    notes = [
        "Cost: our mean LLM requests per query (cached or not) relative to NF over the rows run; the paper prints 1× / ≈4×, "
        "while its own Table 18 call counts give NF 1, PDE-Random d = 10, PDE ≈ 19 + 10 (see `madara audit`)."
    ]
    return rows, notes


# --- Table 2 ---------------------------------------------------------------------------------------


@table("table2", "Table 2: MADARA routing, component EMs and gains (EM %)", grid="table2", also=(PROBES_GRID,))
def table2(res: Results, grid: str) -> Built:
    """Table 2: diagnostics, component EMs and the MADARA route with its EM and ΔNF (CONFLICTS, FEVER)."""
    pairs = table_pairs(res, pv.ROUTING_PAIRS, ("nf", "three_agent", "cot", "sda", "madara"))
    madara = {pair_key: madara_outcome(res, *pair_key, grid) for pair_key in pairs}
    tests = mcnemar_pairs({k: (madara[k][2], res.find(*k, "nf", grid)) for k in pairs})
    stars = holm_stars(tests)
    rows = []
    ours_cols: dict[tuple[str, str], list[float | None]] = {}
    for model, benchmark in pairs:
        get = lambda column, m=model, b=benchmark: pv.TABLE2.get((m, b, column))  # noqa: E731
        probe = res.probe(model, benchmark)
        route, em, _, _ = madara[(model, benchmark)]
        ems = {s: our_em(res, model, benchmark, s, grid) for s in ("nf", "three_agent", "cot", "sda")}
        delta = minus(em, ems["nf"])
        row = {
            "Model": model_label(model),
            "Task": benchmark_label(benchmark),
            "RSC": pair_text(class_label(probe.rsc_class if probe else None), class_label(get("rsc_class"))),
            "ρ̂1": pair(probe.rho_at(0) if probe else None, get("rho1"), digits=2),
        }
        for s in ("nf", "three_agent", "cot", "sda"):
            row[strategy_label(s)] = pair(ems[s], get(s), paper_mark=pv.TABLE2_STARS.get((model, benchmark, s), ""))
        dagger = "†" if (model, benchmark, "strategy") in pv.TABLE2_DAGGER else ""
        row["Strategy"] = pair_text(strategy_label(route), (strategy_label(get("strategy")) or "") + dagger)
        row["MADARA EM"] = pair(
            em, get("madara"), ours_mark=stars.get((model, benchmark), ""), paper_mark=pv.TABLE2_STARS.get((model, benchmark, "madara"), "")
        )
        row["ΔNF"] = pair(delta, get("delta_nf"), signed=True)
        rows.append(row)
        if (model, benchmark) not in pv.ROUTING_PAIRS:
            continue  # the averages are over the paper's five models
        for column, value in (*ems.items(), ("madara", em), ("delta_nf", delta)):
            ours_cols.setdefault((benchmark, column), []).append(value)
    for benchmark in ("conflicts", "fever"):
        row = {"Model": f"Average {benchmark_label(benchmark)}", "Task": "", "RSC": "", "ρ̂1": ""}
        for column, label in (("nf", "NF"), ("three_agent", "3-Agent"), ("cot", "CoT"), ("sda", "SDA"), ("madara", "MADARA EM"), ("delta_nf", "ΔNF")):
            values = ours_cols[(benchmark, column)]
            ours = mean_of_all(values)
            row[label] = pair(ours, pv.TABLE2_AVERAGES[(benchmark, column)], signed=column == "delta_nf")
        row["Strategy"] = "–"
        rows.append(row)
    notes = [
        "Our RSC class, ρ̂1 and route come from the probe (results/probes); MADARA EM from the `madara` cell, or the routed strategy's cell when that has not run.",
        f"Stars (ours): exact McNemar vs NF on per-query predictions, Holm over the {len(tests)} pair(s) available; paper stars as printed.",
        "† " + next(iter(pv.TABLE2_DAGGER.values())),
        "Averages (ours) need all five models.",
    ]
    return rows, notes


@table("table5", "Table 5: PDE gain on TriviaQA by context quality (EM pp vs NF)", grid="table16", also=("table1",))
def table5(res: Results, grid: str) -> Built:
    """Table 5: TriviaQA PDE gain (EM pp vs NF) under BM25, Contriever and a Qwen3-0.6B reranker."""
    groups = {"bm25s": SPARSE, "dense": DENSE, "rerank": RERANK}
    labels = {"bm25s": "BM25 (Sparse)", "dense": "Contriever (Dense)", "rerank": "Qwen3-0.6B (Reranker)"}
    rows = []
    for model in ("llama-3.1-8b", "qwen2.5-7b", "gemma-2-9b"):
        row = {"Model": model_label(model), "Capacity (paper)": "Weak" if model == "llama-3.1-8b" else "Strong"}
        for retriever, label in labels.items():
            pde = our_em(res, model, "triviaqa", "pde", grid, groups[retriever])
            nf = our_em(res, model, "triviaqa", "nf", grid, groups[retriever])
            gain = minus(pde, nf)
            row[label] = pair(gain, pv.TABLE5[(model, "triviaqa", retriever)], signed=True)
        rows.append(row)
    return rows, ["Gain = PDE EM − NF EM on TriviaQA with the same retriever (cell field `retriever`)."]


@table("table7", "Table 7: SDA vs RRF on Qwen3-8B × CONFLICTS", grid="table7")
def table7(res: Results, grid: str) -> Built:
    """Table 7: SDA vs RRF aggregation on Qwen3-8B × CONFLICTS (EM %, Token F1 %: the
    paper prints F1 as a fraction; here it is in percent, as every other rate)."""
    rows = []
    for (model, benchmark, strategy), (em, f1) in pv.TABLE7.items():
        cell = res.find(model, benchmark, strategy, grid)
        rows.append({"Method": strategy_label(strategy) + (" (k=60)" if strategy == "rrf" else ""), "EM (%)": pair(percent(cell), em),
                     "Token F1 (%)": pair(percent_f1(cell), 100 * f1, digits=1)})
    for model, benchmark in table_pairs(res, (), [s for (_, _, s) in pv.TABLE7]):
        if (model, benchmark) == next(iter(pv.TABLE7))[:2]:
            continue
        for strategy in dict.fromkeys(s for (_, _, s) in pv.TABLE7):
            cell = res.find(model, benchmark, strategy, grid)
            rows.append({"Method": f"{strategy_label(strategy)} — {model_label(model)} × {benchmark_label(benchmark)}",
                         "EM (%)": pair(percent(cell), None), "Token F1 (%)": pair(percent_f1(cell), None)})
    return rows, ["All four rows share the same underlying 3-agent scores (response cache)."]


@table("table9", "Table 9: Per-model calibration NF vs the static threshold", grid="table2", also=("table1",))
def table9(res: Results, grid: str) -> Built:
    """Table 9: per-model calibration NF (CFL / FVR / TQA) vs the static threshold τ = 30%."""
    rows = []
    used = []
    for model in pv.CORE_MODELS:
        row = {"Model": model_label(model)}
        for benchmark, label in (("conflicts", "NF CFL"), ("fever", "NF FVR"), ("triviaqa", "NF TQA")):
            nf, source = routing_nf(res, model, benchmark, grid)
            used.append(source)
            row[label] = pair(nf, pv.TABLE9[(model, benchmark, "nf")])
        row["τ_static"] = setting(pv.TAU_NF, pv.TABLE9_TAU_STATIC)
        rows.append(row)
    notes = [
        "The paper prints a dash for strong models' TriviaQA NF (shown n/a): the routing rule does not use it. τ_static is a setting, not a measurement: the router's default τ_NF, the paper's value.",
        routing_nf_note(res, used) + " The paper's caption calls these calibration NF; its values equal Table 2's NF on the evaluated set.",
    ]
    return rows, notes
