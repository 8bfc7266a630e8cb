"""What each paper table is: its name, title and the grid(s) whose cells fill it.

The order here is the order ``madara tables`` writes them in. The builders live in
:mod:`madara_cli.tables.builders`; :mod:`madara_cli.tables.registry` joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from madara_cli.tables.lookup import PROBES_GRID


@dataclass(frozen=True)
class TableSpec:
    """A paper table: its title and the grid(s) whose cells fill it."""

    name: str
    title: str
    grid: str
    also: tuple[str, ...] = ()


def _spec(name: str, title: str, grid: str, also: tuple[str, ...] = ()) -> tuple[str, TableSpec]:
    return name, TableSpec(name, title, grid, also)


SPECS: dict[str, TableSpec] = dict(
    [
        _spec("table1", "Table 1: PDE component ablation (EM %)", "table1"),
        _spec("table2", "Table 2: MADARA routing, component EMs and gains (EM %)", "table2", (PROBES_GRID,)),
        _spec("table3", "Table 3: RSC vs entropy-based routing", "table2", (PROBES_GRID,)),
        _spec("table4", "Table 4: RSC diagnostic results", PROBES_GRID),
        _spec("table5", "Table 5: PDE gain on TriviaQA by context quality (EM pp vs NF)", "table16", ("table1",)),
        _spec("table6", "Table 6: MuSiQue results (Qwen2.5-7B, 100 queries)", "table6"),
        _spec("table7", "Table 7: SDA vs RRF on Qwen3-8B × CONFLICTS", "table7"),
        _spec("table8", "Table 8: ρ̂1 threshold sensitivity (CFL + FVR, 10 pairs)", "table2", (PROBES_GRID,)),
        _spec("table9", "Table 9: Per-model calibration NF vs the static threshold", "table2", ("table1",)),
        _spec("table10", "Table 10: Per-query Spearman ρ on CONFLICTS (mean ± std)", PROBES_GRID),
        _spec("table11", "Table 11: RSC split-half and 30-query subset stability", PROBES_GRID),
        _spec("table12", "Table 12: RSC vs entropy routing per model-task pair", "table2", (PROBES_GRID,)),
        _spec("table13", "Table 13: Bootstrap 95% CIs on ρ̂_k and classification stability", PROBES_GRID),
        _spec("table14", "Table 14: McNemar tests with Holm-Bonferroni correction", "table2", ("table7",)),
        _spec("table15", "Table 15: CONFLICTS EM across model scales", "table15"),
        _spec("table16", "Table 16: Dense retrieval on TriviaQA (Contriever top-10)", "table16"),
        _spec("table17", "Table 17: MuSiQue chain-coverage analysis (EM %)", "table6"),
        _spec("table18", "Table 18: Cross-encoder reranking vs NF and LLM call costs", "table18"),
        _spec("table19", "Table 19: Oracle gap of NF-only vs RSC-based routing (pp)", "table2", (PROBES_GRID,)),
        _spec("table_g1", "Table G.1: Token F1 (paper values not in the text)", "table2"),
        _spec("table_polarization", "§4.1: Score polarization, base vs CoT prompts (extreme-score rate)", "table2"),
        _spec("table_b_atf", "Appendix B: ATF filtering behaviour", "table2"),
        _spec("table_h_floor", "Appendix H: the absolute capability floor", "floor"),
        _spec("table_j_hops", "Appendix J: supporting paragraphs in PDE's top-5 by hop count (MuSiQue)", "table6"),
    ]
)
