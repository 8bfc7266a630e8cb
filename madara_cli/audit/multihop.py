"""Tables 6 and 17 — multi-hop MuSiQue: Table 6's deltas and Table 17's chain subsets
(sizes, size-weighted mix, GRIM test)."""

from __future__ import annotations

from madara_cli import paper as pv
from madara_cli.audit.judging import AuditRow, H, attainable, check, numeric_row, strategy_label, underivable


def audit_table6_17() -> list[AuditRow]:
    nf = pv.TABLE6[("qwen2.5-7b", "musique", "nf")][0]
    rows = [numeric_row("Table 6", f"{strategy_label(strategy)} ΔEM = EM − NF", delta, em - nf, 3 * H)
            for (_model, _benchmark, strategy), (em, _, delta) in pv.TABLE6.items() if delta is not None]
    b = pv.TABLE6_BOOTSTRAP
    rows.append(underivable("Table 6", "3-Agent − NF bootstrap 95% CI and p", f"[{b['ci'][0]:+.1f}, {b['ci'][1]:+.1f}], p={b['p']}",
                            "needs per-query predictions"))
    t17 = pv.TABLE17
    n1, n2 = t17["chain_complete"][0], t17["chain_broken"][0]
    for i, (name, strategy) in enumerate((("NF", "nf"), ("3-Agent", "three_agent"), ("PDE", "pde")), start=1):
        all_row = t17["all"][i]
        rows.append(numeric_row("Table 17", f"All-queries {name} vs Table 6", all_row, pv.TABLE6[("qwen2.5-7b", "musique", strategy)][0], 0.0))
        mix = (n1 * t17["chain_complete"][i] + n2 * t17["chain_broken"][i]) / (n1 + n2)
        rows.append(numeric_row("Table 17", f"{name}: size-weighted mix of subsets = All", all_row, mix, 2 * H))
    rows.append(check("Table 17", "subset sizes sum to All", str(t17["all"][0]), str(n1 + n2), n1 + n2 == t17["all"][0]))
    bad = [f"{s} {v}" for s in ("chain_complete", "chain_broken") for v in t17[s][1:] if not attainable(v, t17[s][0])]
    rows.append(check("Table 17", "subset EMs attainable as k/n (GRIM)", "n = 23, 77", f"{6 - len(bad)}/6 attainable", not bad, "; ".join(bad)))
    return rows
