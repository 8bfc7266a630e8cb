"""Cell formatting: ``ours / paper (Δ)`` text (Δ = ours − paper) that keeps its numbers; ``—``
marks a cell not run yet, ``n/a`` a value the paper does not print.
"""

from __future__ import annotations

import math

from madara_cli.results.health import MARK

MISSING = "—"
NOT_REPORTED = "n/a"


def fmt(x: float | None, digits: int = 1, signed: bool = False) -> str:
    """A number as a table prints it (``−`` for minus, ``—`` when absent, :data:`MARK` when degraded)."""
    if isinstance(x, Several):
        return f"({x.variants} variants)"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    text = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return text.replace("-", "−") + (MARK if getattr(x, "degraded", False) else "")


class Measured(float):
    """An EM of ours (%) that knows its n, the cell's F1 and contains (fractions) and whether it is degraded."""

    n: int | None
    f1: float | None
    contains: float | None
    ident: tuple[str, str, str, str] | None  # (model, benchmark, strategy, metric) ids: the long CSV's columns
    key: str | None  # the cell's key (its results folder name), for joining the long CSV with summary.csv
    degraded: bool

    def __new__(cls, value: float, n: int | None = None, f1: float | None = None, contains: float | None = None,
                ident: tuple[str, str, str, str] | None = None, key: str | None = None, degraded: bool = False) -> "Measured":
        obj = super().__new__(cls, value)
        obj.n, obj.f1, obj.contains, obj.ident, obj.key, obj.degraded = n, f1, contains, ident, key, degraded
        return obj


class Several(float):
    """An unsettled table value (:class:`~madara_cli.results.stored.Unsettled`): NaN shown as
    ``(N variants)``; a Δ or gain computed from it is unsettled too."""

    variants: int

    def __new__(cls, variants: int) -> "Several":
        obj = super().__new__(cls, math.nan)
        obj.variants = variants
        return obj

    def _same(self, *_: object) -> "Several":
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = __round__ = _same


# Below this EM (%, the routing's tau_NF) exact match says little: rows without a paper value add F1 and contains.
CAPABILITY_FLOOR = 30.0
FLOOR_NOTE = f"Rows below the capability floor (EM < {CAPABILITY_FLOOR:.0f}%) without a paper value show F1 and contains (%) beside EM."


class Pair(str):
    """An ``ours / paper (Δ)`` cell's text that keeps its numbers, so the long CSV never re-parses text."""

    ours: float | None
    paper: float | None
    delta: float | None
    n: int | None
    p: float | None

    def __new__(cls, text: str, ours=None, paper=None, n=None, p=None) -> "Pair":
        obj = super().__new__(cls, text)
        obj.ours = None if ours is None else float(ours)
        obj.paper = None if paper is None else float(paper)
        obj.delta = None if ours is None or paper is None else float(ours) - float(paper)
        obj.n, obj.p = n, p
        obj.ident = getattr(ours, "ident", None)
        obj.key = getattr(ours, "key", None)
        return obj


def pair(ours: float | None, paper: float | None, digits: int = 1, signed: bool = False, ours_mark: str = "", paper_mark: str = "") -> str:
    """``ours / paper (Δ)``; ``—`` for ours not run, ``n/a`` for a value the paper lacks."""
    o = fmt(ours, digits, signed) + (ours_mark if ours is not None else "")
    p = NOT_REPORTED if paper is None else fmt(paper, digits, signed) + paper_mark
    n = getattr(ours, "n", None)
    f1, contains = getattr(ours, "f1", None), getattr(ours, "contains", None)
    if isinstance(ours, Several):
        return Pair(f"{o} / {p}", None, paper)
    if paper is None and ours is not None and ours < CAPABILITY_FLOOR and f1 is not None and contains is not None:
        o += f" (F1 {fmt(100 * f1, digits)}, cont. {fmt(100 * contains, digits)})"
    if ours is None or paper is None:
        return Pair(f"{o} / {p}", ours, paper, n)
    return Pair(f"{o} / {p} ({fmt(round(ours - paper, digits + 2), digits, signed=True)})", ours, paper, n)


def setting(value: float, paper: float | None, digits: int = 1) -> str:
    """A constant both sides set (Table 9's τ_static): its value once, marked a setting, never
    ``30.0 / 30.0 (+0.0)`` as if a measurement agreed; the long CSV keeps only the paper's."""
    same = paper is not None and round(value, digits) == round(paper, digits)
    text = f"{fmt(value, digits)} (setting)" if same else f"{fmt(value, digits)} (setting; paper {fmt(paper, digits)})"
    return Pair(text, None, paper)


def pair_text(ours: str | None, paper: str | None) -> str:
    """Categorical cell (class, strategy): ``ours / paper`` with ``(=)`` or ``(≠)``."""
    o = ours if ours else MISSING
    p = paper if paper else NOT_REPORTED
    if not ours or not paper:
        return f"{o} / {p}"
    return f"{o} / {p} ({'=' if ours == paper else '≠'})"


def pair_count(ours: tuple[int, int] | None, paper: tuple[int, int] | None) -> str:
    o = f"{ours[0]}/{ours[1]}" if ours and ours[1] else MISSING
    p = f"{paper[0]}/{paper[1]}" if paper else NOT_REPORTED
    if not (ours and ours[1]) or not paper:
        return f"{o} / {p}"
    return f"{o} / {p} ({'=' if ours[0] * paper[1] == paper[0] * ours[1] else '≠'})"
