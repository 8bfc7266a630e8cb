"""The paper checked against itself (``madara audit``): every number it derives from its
other published numbers, recomputed from :mod:`madara_cli.paper` alone (offline, well under
a second; nothing in :mod:`madara_cli.tables` imports it).

Each check returns :class:`~madara_cli.audit.judging.AuditRow` s with the published value,
the recomputed one and a status: ``"match"`` (equal at the printed precision, or within
what rounding the printed inputs explains; the note says which and the tolerance),
``"discrepancy"`` (no unrounded inputs consistent with the printed ones give the printed
value) or ``"not derivable"`` (the paper does not print enough).

One module per topic, grouped as :mod:`madara_cli.tables.builders` groups the tables:
:mod:`.main_body` (Tables 1, 2, 5, 7, 9), :mod:`.routes` (3, 8, 12, 19), :mod:`.rsc_probe`
(4, 10, 11, 13), :mod:`.mcnemar` (14, 15, 16), :mod:`.multihop` (6, 17), :mod:`.reranking`
(18); :mod:`.judging` and :mod:`.published` hold what checks share; :mod:`.policies` compares
routing policies on the printed numbers (``--policies``). This package is the catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from madara_cli.audit.judging import STATUSES, AuditRow
from madara_cli.audit.main_body import audit_table1, audit_table2, audit_table5, audit_table7, audit_table9
from madara_cli.audit.mcnemar import audit_table14, audit_table15, audit_table16
from madara_cli.audit.multihop import audit_table6_17
from madara_cli.audit.published import published_diagnostics
from madara_cli.audit.reranking import audit_table18
from madara_cli.audit.routes import audit_table8, audit_table12, audit_table19
from madara_cli.audit.rsc_probe import audit_table4, audit_table10, audit_table11, audit_table13

__all__ = ["AUDITS", "STATUSES", "AuditRow", "format_audit", "published_diagnostics", "run_audit", "summarize"]

AUDITS: tuple[Callable[[], list[AuditRow]], ...] = (
    audit_table1, audit_table2, audit_table12, audit_table4, audit_table5, audit_table6_17, audit_table7, audit_table8, audit_table9,
    audit_table10, audit_table11, audit_table13, audit_table14, audit_table15, audit_table16, audit_table18, audit_table19
)


def run_audit() -> list[AuditRow]:
    """Every derivable published number, recomputed from the paper's other printed numbers."""
    return sorted((row for audit in AUDITS for row in audit()), key=lambda r: _table_order(r.table))


def _table_order(table: str) -> int:
    digits = "".join(ch for ch in table if ch.isdigit())
    return int(digits) if digits else 999


def summarize(rows: Iterable[AuditRow]) -> dict[str, int]:
    """Counts per status."""
    counts = {s: 0 for s in STATUSES}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def format_audit(rows: Sequence[AuditRow], only: str | None = None) -> str:
    """Plain-text report: one line per item (optionally only one status), then totals."""
    marks = {"match": "ok ", "discrepancy": "!! ", "not derivable": " - "}
    lines, current = [], None
    for r in rows:
        if only and r.status != only:
            continue
        if r.table != current:
            current = r.table
            lines.append(f"\n{r.table}")
        lines.append(f"  {marks.get(r.status, '   ')}[{r.status}] {r.item}: published {r.published} | recomputed {r.recomputed}")
        if r.note:
            lines.append(f"        {r.note}")
    lines += ["", ", ".join(f"{v} {k}" for k, v in summarize(rows).items()) + f" ({len(rows)} items)"]
    return "\n".join(lines).lstrip("\n")
