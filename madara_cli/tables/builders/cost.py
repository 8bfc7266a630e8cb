"""Cost: cross-encoder reranking vs NF and LLM calls per query (Table 18)."""

from __future__ import annotations

import numpy as np

from madara_cli import paper as pv
from madara_cli.tables.builders.common import mean_of_all, minus, model_label, our_em, strategy_label
from madara_cli.tables.declare import Built, table
from madara_cli.tables.lookup import Results
from madara_cli.tables.pairs import MISSING, pair


@table("table18", "Table 18: Cross-encoder reranking vs NF and LLM call costs", grid="table18")
def table18(res: Results, grid: str) -> Built:
    """Table 18: cross-encoder reranking vs NF on CONFLICTS and FEVER, plus LLM calls per query."""
    rows = []
    collected: dict[tuple[str, str], list[float | None]] = {}
    for model in pv.TABLE18_MODELS:
        row = {"Model": model_label(model)}
        for benchmark, short in (("conflicts", "CFL"), ("fever", "FVR")):
            nf = our_em(res, model, benchmark, "nf", grid)
            ce = our_em(res, model, benchmark, "cross_encoder", grid)
            delta = minus(ce, nf)
            for column, value in (("nf", nf), ("cross_encoder", ce), ("delta", delta)):
                label = f"{short} {'CE' if column == 'cross_encoder' else ('Δ' if column == 'delta' else 'NF')}"
                row[label] = pair(value, pv.TABLE18[(model, benchmark, column)], signed=column == "delta")
                collected.setdefault((benchmark, column), []).append(value)
        rows.append(row)
    avg = {"Model": "Avg."}
    for (benchmark, column), values in collected.items():
        short = "CFL" if benchmark == "conflicts" else "FVR"
        label = f"{short} {'CE' if column == 'cross_encoder' else ('Δ' if column == 'delta' else 'NF')}"
        ours = mean_of_all(values)
        avg[label] = pair(ours, pv.TABLE18_AVERAGE[(benchmark, column)], signed=column == "delta")
    rows.append(avg)
    calls = []
    for strategy, printed in pv.TABLE18_CALLS_PRINTED.items():
        measured = [c.calls_per_query() for c in res.cells if c.strategy == strategy and c.calls_per_query() is not None]
        ours = f"{np.mean(measured):.1f}" if measured else MISSING
        calls.append(f"{strategy_label(strategy)} {ours} / {printed}")
    notes = [
        "CE = ms-marco-MiniLM-L-12-v2 reranking then generation (strategy `cross_encoder`).",
        "LLM calls/query, ours (mean requests per query over all cells on disk, cached or not) / paper: " + "; ".join(calls) + ".",
    ]
    return rows, notes
