"""The results index the tables read: finished cells and probes found on disk.

The index itself lives in the results package (:func:`madara_cli.results.stored.load_results`),
which reads every results file: a :class:`Results` of :class:`StoredCell` (a cell's
:class:`~madara_cli.results.outputs.CellRecord`, its folder, and which metric ``em``
holds) and probe records (:class:`~madara_cli.results.outputs.ProbeRecord`, typed:
``probe.rsc_class``, ``probe.rho_at(0)``, ``probe.degenerate.mean_score``).
:meth:`Results.find` picks the cell a table shows for a (model, benchmark, strategy) in
any grid folder by a rule it states (``VARIANT_RULE``: the table's own grid, then
``--prefer``; variants it cannot tell apart raise :class:`AmbiguousVariant`; then full
runs over ``limit``-ed ones, then the largest n). This module adds the retriever families the tables group cells by.
Nothing here formats or computes a table value, and nothing is re-run.
"""

from __future__ import annotations

from pathlib import Path

from madara_cli.results.record_files import PROBE_FILE, PROBES_GRID
from madara_cli.results.stored import (
    BINARY_METRICS,
    TABLE_METRICS,
    VARIANT_RULE,
    AmbiguousVariant,
    Pick,
    Results,
    StoredCell,
    StoredProbe,
    Support,
    hop_count,
    load_results,
    support_in_topk,
)

__all__ = [
    "BINARY_METRICS", "PROBE_FILE", "PROBES_GRID", "TABLE_METRICS", "VARIANT_RULE", "AmbiguousVariant", "Pick", "Results", "StoredCell", "StoredProbe", "Support",
    "hop_count", "load_results", "support_in_topk", "_results", "SPARSE", "DENSE", "RERANK",
]

SPARSE = ("bm25s", "pyserini")
DENSE = ("dense",)
RERANK = ("rerank",)


def _results(source: Path | str | Results) -> Results:
    return source if isinstance(source, Results) else load_results(source)
