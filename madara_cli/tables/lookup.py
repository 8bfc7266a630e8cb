"""The results index the tables read (it lives in :mod:`madara_cli.results.stored`, which
:meth:`Results.find` and ``VARIANT_RULE`` with it), plus the retriever families tables group cells by.
"""

from __future__ import annotations

from pathlib import Path

from madara_cli import paper as pv
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
    "hop_count", "load_results", "support_in_topk", "_results", "probed_pairs", "SPARSE", "DENSE", "RERANK",
]

SPARSE = ("bm25s", "pyserini")
DENSE = ("dense",)
RERANK = ("rerank",)


def probed_pairs(results: Results) -> list[tuple[str, str]]:
    """Every probed (model, benchmark), the paper's models first."""
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    return sorted({(p.model, p.benchmark) for p in results.probes}, key=lambda mb: (order.get(mb[0], 99), mb[0], mb[1]))


def _results(source: Path | str | Results) -> Results:
    return source if isinstance(source, Results) else load_results(source)
