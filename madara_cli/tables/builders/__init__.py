"""One function per paper table, declared with :func:`madara_cli.tables.declare.table`: a results
folder (or loaded Results) in, a DataFrame of ``ours / paper (Δ)`` cells out.

- :mod:`.main`               Tables 1, 2, 5, 7, 9 — the paper's main-body EM tables
- :mod:`.routing`            Tables 3, 8, 12, 19 — routing vs entropy, thresholds and the oracle
- :mod:`.probe_diagnostics`  Tables 4, 10, 11, 13 — the RSC probe's diagnostics
- :mod:`.significance`       Tables 14, 15, 16 — McNemar, model scales, dense retrieval
- :mod:`.musique`            Tables 6, 17 and Appendix J — multi-hop MuSiQue
- :mod:`.cost`               Table 18 — cross-encoder reranking and LLM calls
- :mod:`.appendix`           Table G.1, §4.1 polarization, Appendix B (ATF), Appendix H (floor)
- :mod:`.common`             public helpers the builders share (labels, lookups, tests)

:data:`TABLES`: by short name, in the order ``madara tables`` writes them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from madara_cli.tables.builders import appendix, cost, main, musique, probe_diagnostics, routing, significance  # noqa: F401 - each declares its tables
from madara_cli.tables.declare import DECLARED, Table
from madara_cli.tables.lookup import Results

# The order ``madara tables`` writes them in (and the report shows them in).
ORDER = (*(f"table{i}" for i in range(1, 20)), "table_g1", "table_polarization", "table_b_atf", "table_h_floor", "table_j_hops")

if set(ORDER) != set(DECLARED):  # a table declared but not placed, or placed but never declared
    raise RuntimeError(f"tables declared but not in ORDER: {sorted(set(DECLARED) - set(ORDER))}; "
                       f"in ORDER but never declared: {sorted(set(ORDER) - set(DECLARED))}")

TABLES: dict[str, Table] = {name: DECLARED[name] for name in ORDER}


def resolve_table_name(name: str) -> str:
    """Accept 'table2', '2', 'Table 2', 'g1', 'G.1', 'table_g1'; raise ValueError listing valid names."""
    key = name.strip().lower().replace(" ", "").replace(".", "")
    key = key.removeprefix("table").lstrip("_")
    candidate = f"table{key}" if key[:1].isdigit() else f"table_{key}"
    if candidate not in TABLES:
        raise ValueError(f"unknown table {name!r}; valid: {', '.join(TABLES)}")
    return candidate


def build_table(name: str, results_dir: Path | str | Results) -> pd.DataFrame:
    """Build one table by name (see :data:`TABLES`)."""
    return TABLES[resolve_table_name(name)].builder(results_dir)
