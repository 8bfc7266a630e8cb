"""Table 18 — cross-encoder reranking: its deltas, its NF against Table 2, its averages."""

from __future__ import annotations

from functools import partial

import numpy as np

from madara_cli import paper as pv
from madara_cli.audit.judging import AuditRow, H, numeric_row, pair_label


def audit_table18() -> list[AuditRow]:
    rows: list[AuditRow] = []
    for model in pv.TABLE18_MODELS:
        for benchmark in ("conflicts", "fever"):
            get = partial(pv.lookup, pv.TABLE18, model, benchmark)
            label = pair_label(model, benchmark)
            rows.append(numeric_row("Table 18", f"{label} Δ = CE − NF", get("delta"), get("cross_encoder") - get("nf"), 3 * H))
            rows.append(numeric_row("Table 18", f"{label} NF vs Table 2", get("nf"), pv.TABLE2[(model, benchmark, "nf")], 0.0))
    rows += [
        numeric_row("Table 18", f"Avg {pv.BENCHMARK_LABELS[benchmark]} {column}", pv.TABLE18_AVERAGE[(benchmark, column)],
                    float(np.mean([pv.TABLE18[(m, benchmark, column)] for m in pv.TABLE18_MODELS])), 2 * H, note="mean of the five printed rows")
        for benchmark in ("conflicts", "fever")
        for column in pv.TABLE18_COLUMNS
    ]
    return rows
