"""Render tables (a header, string cells, footnotes in ``df.attrs``) as Markdown, LaTeX (pandas'
Styler) and CSV, and ``long``, the tidy numeric CSV (``<table>.long.csv``, ``all.long.csv``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from madara_cli.core.metrics import metric_name
from madara_cli.results.long_format import LONG_COLUMNS, long_table
from madara_cli.results.summary import write_summary
from madara_cli.tables.builders import TABLES, resolve_table_name
from madara_cli.tables.lookup import load_results

FORMATS = ("md", "tex", "csv", "long")


def _cells(df: pd.DataFrame) -> list[list[str]]:
    return [[("" if v is None else str(v)) for v in row] for row in df.itertuples(index=False, name=None)]


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(df: pd.DataFrame) -> str:
    """GitHub-flavoured Markdown: a heading, a pipe table and the notes as a list."""
    esc = _md_escape
    header = [esc(c) for c in df.columns]
    lines = []
    if df.attrs.get("title"):
        lines += [f"### {df.attrs['title']}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for row in _cells(df):
        lines.append("| " + " | ".join(esc(c) for c in row) + " |")
    notes = df.attrs.get("notes") or []
    if notes:
        lines.append("")
        lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n"


# Order matters: multi-character sequences before their parts, specials before unicode.
_LATEX_SPECIAL = [("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"), ("{", r"\{"),
                  ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}")]
_LATEX_UNICODE = [
    ("ρ̂", r"$\hat{\rho}$"), ("ρ*", r"$\rho^*$"), ("ρ", r"$\rho$"), ("Δ", r"$\Delta$"), ("τ", r"$\tau$"), ("±", r"$\pm$"),
    ("≈", r"$\approx$"), ("×", r"$\times$"), ("≥", r"$\geq$"), ("≤", r"$\leq$"), ("≠", r"$\neq$"), ("→", r"$\rightarrow$"),
    ("−", "-"), ("—", "---"), ("–", "--"), ("†", r"$^\dagger$"), ("‡", r"$^\ddagger$"), ("◊", r"$^\diamond$"), ("·", r"$\cdot$"),
    ("χ²", r"$\chi^2$"), ("÷", r"$\div$"), ("²", r"$^2$"),
]


def _escape_plain(text: str) -> str:
    for raw, repl in _LATEX_SPECIAL:
        text = text.replace(raw, repl)
    for raw, repl in _LATEX_UNICODE:
        text = text.replace(raw, repl)
    return text


def latex_escape(text: str) -> str:
    """Escape LaTeX specials, Unicode symbols to math mode, Markdown `code` spans in \\texttt."""
    parts = str(text).split("`")
    return "".join(
        rf"\texttt{{{_escape_plain(part)}}}" if i % 2 and i < len(parts) - 1 else _escape_plain(part) for i, part in enumerate(parts)
    )


_TABLE_PREFIX = re.compile(r"^\s*(Table\s+([A-Za-z]?\d+[A-Za-z.\d]*|[A-Z](\.\d+)?))\s*[:.]\s*")


def latex_caption(title: str) -> str:
    """A title as a LaTeX caption: ``\\caption`` prints its own "Table N:", so the paper's number
    moves to the end ("PDE ablation (paper's Table 1)"), not "Table 3: Table 1: PDE ablation"."""
    m = _TABLE_PREFIX.match(title)
    if not m:
        return title
    return f"{title[m.end():]} (paper's {m.group(1)})"


def to_latex(df: pd.DataFrame) -> str:
    """A ``table`` environment: a booktabs ``tabular`` (pandas' Styler), the notes under it."""
    body = df.copy()
    body.columns = [latex_escape(c) for c in df.columns]
    styler = body.style.hide(axis="index").format(lambda v: latex_escape("" if v is None else str(v)))
    text = styler.to_latex(
        column_format="l" * len(df.columns),
        position="t",
        position_float="centering",
        hrules=True,
        caption=latex_escape(latex_caption(df.attrs["title"])) if df.attrs.get("title") else None,
        label=f"tab:madara-{df.attrs['name']}" if df.attrs.get("name") else None,
    )
    text = text.replace("\\centering\n", "\\centering\n\\scriptsize\n", 1)
    notes = "".join(rf"\par\smallskip\parbox{{\linewidth}}{{\tiny {latex_escape(note)}}}" + "\n" for note in df.attrs.get("notes") or [])
    head, sep, tail = text.rpartition("\\end{table}")
    return head + notes + sep + tail


def to_csv(df: pd.DataFrame) -> str:
    """Plain CSV of the cells (notes live in the Markdown and LaTeX files)."""
    return df.to_csv(index=False)


# Column labels of the tables that name a strategy other than by its label (Table 1).
_STRATEGY_COLUMNS = {"Rand.": "pde_random", "Unif.": "pde_uniform", "Full": "pde"}


def _ids(labels: dict[str, str]) -> dict[str, str]:
    """Label (or id) -> id; a label with a footnote mark (``Gemma-2-9B†``) reads the same."""
    return {**{v: k for k, v in labels.items()}, **{k: k for k in labels}}


def tidy_long(long: pd.DataFrame, metric: str = "em") -> pd.DataFrame:
    """Fill the ids a long table's cells did not carry: ``model``/``benchmark`` from the row's labels,
    ``strategy`` from its column, ``metric`` (× ratio: ``cost``; a strategy's column: ``metric`` in %; else the column)."""
    from madara_cli import paper as pv

    models, benchmarks = _ids(pv.MODEL_LABELS), _ids(pv.BENCHMARK_LABELS)
    strategies = {**_ids(pv.STRATEGY_LABELS), **_STRATEGY_COLUMNS}
    out = long.copy()
    for i in out.index:
        parts = [p.strip().rstrip("†*") for p in str(out.at[i, "row"]).split(" / ")]
        if pd.isna(out.at[i, "model"]):
            out.at[i, "model"] = next((models[p] for p in parts if p in models), None)
        if pd.isna(out.at[i, "benchmark"]):
            out.at[i, "benchmark"] = next((benchmarks[p] for p in parts if p in benchmarks), None)
        column = str(out.at[i, "column"])
        if pd.isna(out.at[i, "strategy"]) and column in strategies:
            out.at[i, "strategy"] = strategies[column]
        if pd.isna(out.at[i, "metric"]):
            if out.at[i, "unit"] == "x":  # "1.0× / 1×": a cost relative to NF
                out.at[i, "metric"] = "cost"
            elif column in strategies:
                out.at[i, "metric"] = metric
                if pd.isna(out.at[i, "unit"]):
                    out.at[i, "unit"] = "%"
            else:
                out.at[i, "metric"] = column
    return out


def to_long_csv(df: pd.DataFrame, metric: str = "em") -> str:
    """Tidy numeric CSV, a line per number (:data:`LONG_COLUMNS`)."""
    return tidy_long(long_table(df), metric).to_csv(index=False)


RENDERERS: dict[str, Callable[[pd.DataFrame], str]] = {"md": to_markdown, "tex": to_latex, "csv": to_csv, "long": to_long_csv}
SUFFIX = {"long": "long.csv"}


def results_notes(results, metric: str) -> list[str]:
    """Every table's footnotes on its numbers: the variants chosen, the metric, the calibration split."""
    notes = []
    metric = metric_name(metric)
    if results.prefer:
        notes.append("Variants chosen by " + ", ".join(f"`--prefer {k}={v}`" for k, v in results.prefer)
                     + " where several matched a table cell (the table's own grid first).")
    if metric == "em":
        # The paper's EM has two readings (README, Choices and deviations): say which.
        notes.append("Ours show EM as the authors' code computes it (SQuAD normalisation: lower-case, no punctuation, no articles); "
                     "Section 5.4's literal lower-case + whitespace match is `madara tables --metric em_strict`.")
    else:
        what = ", Section 5.4's literal reading (lower-case + whitespace only)" if metric == "em_strict" else ""
        notes.append(f"Ours show {metric}{what}: `madara tables --metric {metric}`; the paper's values are EM as printed.")
    splits = sorted({c.calibration_split for c in results.cells if c.calibration_split})
    if splits == ["nested"]:
        notes.append("Evaluated sets contain the calibration queries (benchmark.calibration_split=nested, the paper's reading: Appendix B, Table 9).")
    elif splits == ["disjoint"]:
        notes.append("Evaluated sets exclude the calibration queries (benchmark.calibration_split=disjoint; the paper's reading is nested).")
    elif splits:
        notes.append("Cells mix calibration splits (" + ", ".join(splits) + "): compare like with like.")
    return notes


def write_tables(results_dir: Path, out_dir: Path, only: Sequence[str] | None = None, formats: Iterable[str] = FORMATS,
                 metric: str = "em", routing_nf: str = "calibration", prefer: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """:func:`render_tables`' written paths, in order."""
    return render_tables(results_dir, out_dir, only, formats, metric, routing_nf, prefer).paths


@dataclass(frozen=True)
class WrittenTables:
    """What :func:`render_tables` wrote, and every number of the tables in long form (ids filled), whatever the formats."""

    paths: list[Path]
    long: pd.DataFrame
    titles: dict[str, str]
    unsettled: list = field(default_factory=list)  # Variants per table cell no rule settled (shown "(N variants)")


def render_tables(results_dir: Path, out_dir: Path, only: Sequence[str] | None = None, formats: Iterable[str] = FORMATS,
                  metric: str = "em", routing_nf: str = "calibration", prefer: Sequence[tuple[str, str]] = (),
                  strict: bool = False) -> WrittenTables:
    """Build the requested tables (``only``: "table2", "2", "g1", ...) and write ``out_dir/<table>.<fmt>``.

    ValueError lists the valid names, formats or metrics; ``metric``, ``routing_nf``, ``prefer``
    and ``strict`` are :func:`load_results`'. An unsettled table cell shows ``(N variants)`` and
    is listed in ``unsettled``; with ``strict``, AmbiguousVariant before anything is written.
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in RENDERERS]
    if bad:
        raise ValueError(f"unknown format(s) {', '.join(bad)}; valid: {', '.join(RENDERERS)}")
    names = [resolve_table_name(n) for n in only] if only else list(TABLES)
    results = load_results(results_dir, metric, routing_nf, prefer, strict)
    extra_notes = results_notes(results, metric)
    built = {name: TABLES[name].builder(results) for name in dict.fromkeys(names)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    longs: list[pd.DataFrame] = []
    titles: dict[str, str] = {}
    for name, df in built.items():
        titles[name] = str(df.attrs.get("title") or name)
        if extra_notes:
            df.attrs["notes"] = [*df.attrs.get("notes", []), *extra_notes]
        for fmt in formats:
            path = out / f"{name}.{SUFFIX.get(fmt, fmt)}"
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(to_long_csv(df, metric) if fmt == "long" else RENDERERS[fmt](df), encoding="utf-8")
            tmp.replace(path)
            written.append(path)
        longs.append(tidy_long(long_table(df, name), metric))
    long = pd.concat(longs, ignore_index=True) if longs else pd.DataFrame(columns=LONG_COLUMNS)
    if "long" in formats:  # every table's numbers in one tidy file
        path = out / "all.long.csv"
        long.to_csv(path, index=False)
        written.append(path)
    write_summary(results_dir)
    return WrittenTables(written, long, titles, distinct_unsettled(df.attrs.get("unsettled", ()) for df in built.values()))


def distinct_unsettled(per_table: Iterable[Iterable]) -> list:
    """The table cells no rule settled, each once however many tables show it."""
    seen: dict[tuple[str, str, str], Any] = {}
    for unsettled in per_table:
        for u in unsettled:
            seen.setdefault(u.wanted, u)
    return list(seen.values())


@dataclass(frozen=True)
class Filled:
    """One paper table's numbers of ours, those beside a paper value, and for those in percent the
    mean Δ (ours − paper, pp) and the largest gap."""

    table: str
    title: str
    ours: int
    beside_paper: int
    mean_delta: float | None
    largest: tuple[str, str, float] | None  # (row, column, Δ)


def filled_cells(long: pd.DataFrame, titles: dict[str, str]) -> list[Filled]:
    """One :class:`Filled` per table, in the order given by ``titles``."""
    out = []
    for name, title in titles.items():
        rows = long[(long["table"] == name) & long["ours"].notna()]
        both = rows[rows["paper"].notna()]
        pct = both[both["unit"] == "%"]
        largest = None
        if not pct.empty:
            i = pct["delta"].abs().idxmax()
            largest = (str(pct.at[i, "row"]), str(pct.at[i, "column"]), float(pct.at[i, "delta"]))
        out.append(Filled(name, title, len(rows), len(both), float(pct["delta"].mean()) if not pct.empty else None, largest))
    return out
