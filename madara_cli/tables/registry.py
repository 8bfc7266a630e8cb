"""The paper tables by name: each spec (:mod:`~madara_cli.tables.specs`) joined to the
builder that fills it (:mod:`~madara_cli.tables.builders`), and lookup by short name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from madara_cli.tables.builders import appendix, cost, diagnostics, main, musique, routing, significance
from madara_cli.tables.lookup import Results, _results
from madara_cli.tables.specs import SPECS, TableSpec

Builder = Callable[[Path | Results], pd.DataFrame]

BUILDERS: dict[str, Builder] = {
    "table1": main.table1,
    "table2": main.table2,
    "table3": routing.table3,
    "table4": diagnostics.table4,
    "table5": main.table5,
    "table6": musique.table6,
    "table7": main.table7,
    "table8": routing.table8,
    "table9": main.table9,
    "table10": diagnostics.table10,
    "table11": diagnostics.table11,
    "table12": routing.table12,
    "table13": diagnostics.table13,
    "table14": significance.table14,
    "table15": significance.table15,
    "table16": significance.table16,
    "table17": musique.table17,
    "table18": cost.table18,
    "table19": routing.table19,
    "table_g1": appendix.table_g1,
    "table_polarization": appendix.table_polarization,
    "table_b_atf": appendix.table_b_atf,
    "table_h_floor": appendix.table_h_floor,
    "table_j_hops": musique.table_j_hops,
}


@dataclass(frozen=True, kw_only=True)
class Table(TableSpec):
    """A paper table: its spec (title, grids) and the builder that fills it."""

    builder: Builder


if set(BUILDERS) != set(SPECS):  # a table without a builder, or a builder without a spec
    raise RuntimeError(
        f"tables without builder: {sorted(set(SPECS) - set(BUILDERS))}; builders without spec: {sorted(set(BUILDERS) - set(SPECS))}"
    )

TABLES: dict[str, Table] = {name: Table(**vars(spec), builder=BUILDERS[name]) for name, spec in SPECS.items()}


def resolve_table_name(name: str) -> str:
    """Accept 'table2', '2', 'Table 2', 'g1', 'G.1', 'table_g1'; raise ValueError listing valid names."""
    key = name.strip().lower().replace(" ", "").replace(".", "")
    key = key.removeprefix("table").lstrip("_")
    candidate = f"table{key}" if key[:1].isdigit() else f"table_{key}"
    if candidate not in TABLES:
        raise ValueError(f"unknown table {name!r}; valid: {', '.join(TABLES)}")
    return candidate


def build_table(name: str, results_dir: Path | Results) -> pd.DataFrame:
    """Build one table by name (see :data:`TABLES`)."""
    return TABLES[resolve_table_name(name)].builder(_results(results_dir))
