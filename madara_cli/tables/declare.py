"""How a paper table is declared: one :func:`table` decorator on ``body(res, grid) -> (rows, notes)``
(rows: a dict per line, column label -> cell text).

The decorator records a :class:`Table` and makes the public builder
``table2(results_dir_or_results) -> DataFrame``, which loads a folder and lets :func:`finish`
attach title, grid and footer. :data:`madara_cli.tables.builders.TABLES` looks them up by
name (it imports every builder module, which this module must not).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from madara_cli.results.health import MARK
from madara_cli.results.stored import Variants
from madara_cli.tables.lookup import VARIANT_RULE, Pick, Results, load_results
from madara_cli.tables.pairs import FLOOR_NOTE, MISSING

Rows = list[dict[str, str]]
Body = Callable[[Results, str], tuple[Rows, Sequence[str]]]
Builder = Callable[[Path | str | Results], pd.DataFrame]
Built = tuple[Rows, Sequence[str]]  # what a table's body returns: its rows and footer notes


@dataclass(frozen=True, kw_only=True)
class Table:
    """A paper table: name, title, the grid(s) whose cells fill it, and its builder."""

    name: str
    title: str
    grid: str
    also: tuple[str, ...] = ()
    builder: Builder


DECLARED: dict[str, Table] = {}  # every table declared so far, by name (in import order)


def table(name: str, title: str, grid: str, also: Sequence[str] = ()) -> Callable[[Body], Builder]:
    """Declare the paper table ``name`` built by the decorated body; a second of the same name is an error."""

    def declare(body: Body) -> Builder:
        if name in DECLARED:
            raise RuntimeError(f"table {name!r} is declared twice: {DECLARED[name].builder.__module__} and {body.__module__}")

        def builder(results: Path | str | Results) -> pd.DataFrame:
            res = (results if isinstance(results, Results) else load_results(results)).watching()
            rows, notes = body(res, spec.grid)
            df = finish(rows, spec, [*notes, *rests_on_notes(res.picked), *unsettled_notes(res.unsettled)])
            df.attrs["unsettled"] = list(res.unsettled)
            return df

        # The body's name and docstring, but the builder's own signature (results -> DataFrame).
        functools.update_wrapper(builder, body, assigned=("__module__", "__name__", "__qualname__", "__doc__"), updated=())
        del builder.__wrapped__
        spec = Table(name=name, title=title, grid=grid, also=tuple(also), builder=builder)
        DECLARED[name] = spec
        return builder

    return declare


# Named in a note up to this many; beyond, a count.
NAMED_IN_NOTE = 4


def _cell_name(cell) -> str:
    return f"{cell.model} × {cell.benchmark} × {cell.strategy}"


def rests_on_notes(picked: Sequence[Pick]) -> list[str]:
    """What a table's numbers rest on: its degraded cells (marked :data:`MARK`), the variant used
    where several matched and by what rule (:data:`VARIANT_RULE`), and replicate seeds set aside."""
    notes = []
    unique = list({id(p.cell): p for p in picked}.values())
    degraded = [p.cell for p in unique if p.cell.degraded]
    if degraded:
        named = "; ".join(f"{_cell_name(c)} ({c.record.health.reason})" for c in degraded[:NAMED_IN_NOTE])
        more = f"; and {len(degraded) - NAMED_IN_NOTE} more" if len(degraded) > NAMED_IN_NOTE else ""
        notes.append(f"{MARK} rests on a degraded cell: more than `health.max_imputed` of a scoring stage's scores were imputed "
                     f"rather than read from the model (results/health.py; `madara show KEY` for each): {named}{more}.")
    chosen = [p for p in unique if p.differing]
    if chosen:
        named = "; ".join(f"{_cell_name(p.cell)}: {p.label()} (by {', '.join(p.rules) or 'the size rule'}; "
                          f"{len(p.others)} other cell(s) set aside)" for p in chosen[:NAMED_IN_NOTE])
        more = f"; and {len(chosen) - NAMED_IN_NOTE} more" if len(chosen) > NAMED_IN_NOTE else ""
        notes.append(f"Variants used: {named}{more}. {VARIANT_RULE}")
    replicated = [p for p in unique if p.replicates]
    if replicated:
        named = "; ".join(f"{_cell_name(p.cell)}: seed {p.cell.seed} used ({_value(p.cell)}), set aside "
                          + ", ".join(f"seed {c.seed} ({_value(c)})" for c in p.replicates) for p in replicated[:NAMED_IN_NOTE])
        more = f"; and {len(replicated) - NAMED_IN_NOTE} more" if len(replicated) > NAMED_IN_NOTE else ""
        notes.append(f"Replicate seeds: one seed fills a table cell (seed 0 first; see docs/results.md), the others are named here "
                     f"with their values: {named}{more}.")
    return notes


def _value(cell) -> str:
    em = cell.em
    return f"{cell.metric} {'—' if em is None else f'{100 * em:.1f}'}%, n={cell.n}"


def unsettled_notes(unsettled: Sequence[Variants]) -> list[str]:
    """A note per table cell shown ``(N variants)``: what they differ in, and each one's ``--prefer``."""
    return [f"(variants) {u.line()}." for u in unsettled]


def finish(rows: Rows, spec: Table, notes: Iterable[str] = ()) -> pd.DataFrame:
    """A table's rows as a DataFrame, ``attrs`` carrying ``name``, ``title``, ``grid`` and ``notes`` (how to
    read cells, the builder's, the floor note where F1 shows, the cells not run yet and their grids)."""
    df = pd.DataFrame(rows, dtype=object).fillna("")  # object: cells keep their Pair numbers
    missing = int(sum(str(v).startswith(MISSING) for v in df.to_numpy().ravel()))
    footer = ["Cells read ours / paper (Δ = ours − paper); — = not run yet; n/a = not printed in the paper."]
    footer.extend(n for n in notes if n)
    if any(" (F1 " in str(v) for v in df.to_numpy().ravel()):
        footer.append(FLOOR_NOTE)
    grids = " and ".join(f"`madara run --grid {g}`" for g in (spec.grid, *spec.also))
    if missing:
        footer.append(f"{missing} cell(s) not run yet (—): produce them with {grids}.")
    else:
        footer.append(f"Produced by {grids}.")
    df.attrs.update(name=spec.name, title=spec.title, grid=spec.grid, notes=footer)
    return df
