"""The audit's record and its judge: :class:`AuditRow`, the statuses, the tolerance that
rounding printed inputs allows, and the labels and number formats every check prints.

Tolerances follow interval arithmetic on printed values with half-unit h (:data:`H`,
0.05 for one decimal): a difference a − b printed separately is off by at most 3h, a
mean of printed values by at most 2h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from madara_cli import paper as pv

H = 0.05  # half a unit of the last printed digit for one-decimal values
STATUSES = ("match", "discrepancy", "not derivable")


@dataclass(frozen=True)
class AuditRow:
    """One audited item: what the paper prints, what its other numbers imply, and why."""

    table: str
    item: str
    published: str
    recomputed: str
    status: str  # "match" | "discrepancy" | "not derivable"
    note: str = ""


def check(table: str, item: str, published: str, recomputed: str, ok: bool, note: str = "") -> AuditRow:
    """A row whose status is ``match`` when ``ok``, else ``discrepancy``."""
    return AuditRow(table, item, published, recomputed, "match" if ok else "discrepancy", note)


def underivable(table: str, item: str, published: str, note: str, recomputed: str = "n/a") -> AuditRow:
    return AuditRow(table, item, published, recomputed, "not derivable", note)


def fmt(x: float | None, digits: int = 2, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def judge(published: float, recomputed: float, tol: float) -> tuple[str, str]:
    """Status and a note saying whether equality is exact at print precision or within rounding."""
    gap = abs(published - recomputed)
    if gap < 1e-6:
        return "match", "exact"
    if gap <= tol + 1e-9:
        return "match", f"within rounding of printed inputs (|Δ| = {gap:.2f} ≤ {tol:.2f})"
    return "discrepancy", f"|Δ| = {gap:.2f} > {tol:.2f} allowed by rounding"


def numeric_row(table: str, item: str, published: float, recomputed: float, tol: float, digits: int = 1, note: str = "") -> AuditRow:
    status, why = judge(published, recomputed, tol)
    return AuditRow(table, item, fmt(published, digits), fmt(recomputed, digits + 1), status, "; ".join(x for x in (why, note) if x))


def pair_label(model: str, benchmark: str | None = None) -> str:
    name = pv.MODEL_LABELS.get(model, model)
    return f"{name} {pv.BENCHMARK_LABELS.get(benchmark, benchmark)}" if benchmark else name


def strategy_label(name: str) -> str:
    return pv.STRATEGY_LABELS.get(name, name)


def count(k: int, n: int) -> str:
    return f"{k}/{n}"


def attainable(pct: float, n: int, decimals: int = 1) -> bool:
    """GRIM test: can some k/n, rounded to ``decimals`` places, print as ``pct`` %?"""
    k = round(pct * n / 100)
    half = 0.5 * 10.0**-decimals
    return any(abs(100 * kk / n - pct) <= half + 1e-9 for kk in (k - 1, k, k + 1) if 0 <= kk <= n)
