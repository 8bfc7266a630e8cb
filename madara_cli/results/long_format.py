"""A rendered paper table as tidy numeric rows (``<table>.long.csv``). A cell that keeps its
numbers beside its text (:class:`NumberPair`, :class:`Identified`) is never re-parsed; any
other is parsed from its text (``"43.5 / 41.2 (+2.3)"``, ``"—"``, a label).
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol, runtime_checkable

LONG_COLUMNS = ["table", "row", "column", "ours", "paper", "delta", "n", "p", "model", "benchmark", "strategy", "metric", "unit", "key"]


@runtime_checkable
class Identified(Protocol):
    """A measured value's (model, benchmark, strategy, metric), or None when it is not one cell's."""

    ident: tuple[str, str, str, str] | None


@runtime_checkable
class NumberPair(Identified, Protocol):
    """A table cell's ``ours / paper (Δ)`` numbers (either may be absent), ours' n and a p-value."""

    ours: float | None
    paper: float | None
    delta: float | None
    n: int | None
    p: float | None


def _numbers(cell: Any) -> NumberPair | None:
    """The cell's own numbers, when it keeps an ours or a paper value."""
    if isinstance(cell, NumberPair) and (cell.ours is not None or cell.paper is not None):
        return cell
    return None


_NUM = re.compile(r"^[+\-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+\-]?\d+)?")


def parse_number(text: Any) -> float | None:
    """The leading number of a cell fragment ("43.5", "−1.2", "3.1×", "0.82 ± 0.1",
    "2.1e-03***"); None for "—", "n/a" and words."""
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if math.isfinite(float(text)) else None
    s = str(text).strip().replace("−", "-").replace("≈", "").lstrip("[(").strip()
    m = _NUM.match(s)
    return float(m.group(0)) if m else None


def split_pair(cell: Any) -> tuple[float | None, float | None, float | None, int | None, float | None] | None:
    """(ours, paper, delta, n, p) of a table cell, or None when it holds no number."""
    if (numbers := _numbers(cell)) is not None:
        return (numbers.ours, numbers.paper, numbers.delta, numbers.n, numbers.p)
    text = str(cell or "")
    if " / " in text:
        left, right = text.split(" / ", 1)
        o, p = parse_number(left), parse_number(right.split(" (")[0])
        if o is None and p is None:
            return None
        return (o, p, None if o is None or p is None else o - p, None, None)
    value = parse_number(text)
    return None if value is None else (value, None, None, None, None)


_RHO_COLUMNS = ("Shuffled", "Contradicted", "Contra.", "Random")


def _unit(text: str, cell: Any, column: str = "", title: str = "") -> str | None:
    """What a cell's number counts, from the cell, its column and the title: ``%``, ``pp``, ``x`` (a
    cost ratio), ``p-value``, ``count``, ``rho``, ``entropy``, or None."""
    if (isinstance(cell, Identified) and cell.ident is not None) or "%" in text:
        return "%"
    if "×" in text:
        return "x"
    col = column.strip()
    if "Δ" in col or "Gain" in col or "(pp)" in col or "(pp)" in title or text.rstrip().endswith("pp"):
        return "pp"
    if "%" in col:
        return "%"
    if col == "p" or col.startswith(("p (", "p-value", "p ")):
        return "p-value"
    if col in ("b", "c", "n", "Queries") or col.startswith("n "):
        return "count"
    if "ρ" in col or col.startswith(_RHO_COLUMNS) or "Spearman" in title:
        return "rho"
    if any(w in col for w in ("EM", "NF", "F1", "CE", "Oracle", "τ")) or "EM %" in title or "(EM" in title:
        return "%"
    if "Entropy" in col:
        return "entropy"
    return None


def long_table(df, name: str | None = None):
    """A paper table as a row per (row, column) holding a number: ``row`` joins the leading label
    columns, the ids are a measured cell's (:class:`Identified`), ``unit`` :func:`_unit`'s, and
    ``key`` a measured value's cell key (summary.csv's), empty for the paper's numbers and aggregates."""
    import pandas as pd

    name = name or df.attrs.get("name", "")
    title = str(df.attrs.get("title") or "")
    cols = list(df.columns)
    parsed = [[split_pair(v) for v in row] for row in df.itertuples(index=False, name=None)]
    n_label = 0
    while n_label < len(cols) - 1 and all(_label_like(df.iat[i, n_label]) for i in range(len(df))):
        n_label += 1
    n_label = max(1, n_label)
    out = []
    for i, row in enumerate(parsed):
        label = " / ".join(str(df.iat[i, j]) for j in range(n_label) if str(df.iat[i, j]).strip())
        for j in range(n_label, len(cols)):
            if row[j] is None:
                continue
            ours, paper, delta, n, p = row[j]
            cell = df.iat[i, j]
            model, benchmark, strategy, metric = (cell.ident if isinstance(cell, Identified) else None) or (None, None, None, None)
            out.append({"table": name, "row": label, "column": str(cols[j]), "ours": ours, "paper": paper, "delta": delta, "n": n, "p": p,
                        "model": model, "benchmark": benchmark, "strategy": strategy, "metric": metric,
                        "unit": _unit(str(cell), cell, str(cols[j]), title), "key": getattr(cell, "key", None)})
    frame = pd.DataFrame(out, columns=LONG_COLUMNS)
    for c in ("ours", "paper", "delta", "p"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    frame["n"] = pd.to_numeric(frame["n"], errors="coerce").astype("Int64")
    return frame


def _label_like(cell: Any) -> bool:
    """Model / benchmark labels ("Qwen2.5-7B", "CONFLICTS"): no ours/paper pair in them."""
    return _numbers(cell) is None and " / " not in str(cell)
