"""The results index the tables read (:func:`load_results`: :class:`Results` of
:class:`StoredCell` and probe records, read through :mod:`.record_files`), and
:func:`support_in_topk`, the one reading of a row's supporting-chain coverage."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from madara_cli.core.errors import ConfigError, RecordError
from madara_cli.core.metrics import metric_name
from madara_cli.results.outputs import METRICS, CellRecord, ProbeRecord, _num
from madara_cli.results.record_files import (
    PROBE_FILE,
    PROBES_GRID,
    folder_problem,
    is_finished_cell,
    read_cell,
    read_predictions,
    read_probe,
    record_problem,
)

# --- the results index ----------------------------------------------------------------------------

TABLE_METRICS = METRICS
BINARY_METRICS = ("em", "em_strict", "contains")


@dataclass(frozen=True, eq=False)
class StoredCell:
    """A finished cell as the tables see it: record, folder, and the metric ``em`` holds (``--metric``)."""

    record: CellRecord = field(compare=False, hash=False)
    path: Path = field(compare=False, hash=False)
    metric: str = "em"

    grid = property(lambda self: self.record.grid)
    model = property(lambda self: self.record.model)
    benchmark = property(lambda self: self.record.benchmark)
    strategy = property(lambda self: self.record.strategy)
    retriever = property(lambda self: self.record.retriever)
    k = property(lambda self: self.record.k)
    seed = property(lambda self: self.record.seed)
    limit = property(lambda self: self.record.limit)
    key = property(lambda self: self.record.key)
    n = property(lambda self: self.record.n)
    accounting = property(lambda self: self.record.accounting)
    assessment = property(lambda self: self.record.assessment)
    calibration_split = property(lambda self: self.record.calibration_split)

    @property
    def em(self) -> float | None:
        """The table metric (``metric``; EM by default), a fraction."""
        return _num(self.record.metric(self.metric))

    @property
    def f1(self) -> float | None:
        return _num(self.record.f1)

    @property
    def contains(self) -> float | None:
        return _num(self.record.contains)

    @property
    def outcome_metric(self) -> str:
        """The per-query 0/1 outcome paired tests use: the table metric when binary, else EM."""
        return self.metric if self.metric in BINARY_METRICS else "em"

    def predictions(self) -> tuple[dict[str, Any], ...] | None:
        try:
            return read_predictions(self.path)
        except ValueError:
            return None

    def calls_per_query(self) -> float | None:
        return self.record.calls_per_query()

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """The settings its key covers, flattened (summary.csv's columns; read once)."""
        from madara_cli.results.summary import cell_settings

        return cell_settings(self.record, self.path)

    @property
    def degraded(self) -> bool:
        return self.record.health.degraded


StoredProbe = ProbeRecord  # a probe as the tables see it: its record, with ``path``


@dataclass(frozen=True)
class Results:
    """Index over a results folder: finished cells and probes."""

    root: Path
    cells: tuple[StoredCell, ...]
    probes: tuple[ProbeRecord, ...]
    skipped: tuple[str, ...] = ()  # folders that hold results madara cannot read
    problems: tuple[tuple[str, str], ...] = ()  # (folder, what is wrong with it), the same folders
    routing_nf: str = "calibration"  # the NF EM the routing tables route on (ROUTING_NF_SOURCES)
    prefer: tuple[tuple[str, str], ...] = ()  # ``--prefer KEY=VALUE``: which variant fills a table cell (VARIANT_RULE)
    strict: bool = False  # ``--strict``: a table cell no rule settles raises AmbiguousVariant instead of showing Unsettled
    # What :meth:`find` returned (and could not settle) since :meth:`watching`: one table's health marks and variant notes.
    picked: list["Pick"] = field(default_factory=list, compare=False, repr=False)
    unsettled: list["Variants"] = field(default_factory=list, compare=False, repr=False)

    def watching(self) -> "Results":
        """A copy whose :attr:`picked` and :attr:`unsettled` start empty: what one table's lookups return."""
        return replace(self, picked=[], unsettled=[])

    def find(self, model: str, benchmark: str, strategy: str, grid: str | None = None,
             retrievers: Sequence[str] = ("bm25s", "pyserini")) -> "StoredCell | Unsettled | None":
        """The cell that fills one table cell, by :data:`VARIANT_RULE`; variants no rule settles give
        :class:`Unsettled` (recorded in :attr:`unsettled`; ``strict``: :class:`AmbiguousVariant`)."""
        matches = [
            c for c in self.cells if (c.model, c.benchmark, c.strategy) == (model, benchmark, strategy) and c.retriever in retrievers
        ]
        if not matches:
            return None
        rules: list[str] = []
        pool = matches
        own = [c for c in pool if grid is not None and c.grid == grid]
        if own and len(own) < len(pool):
            pool, rules = own, [f"the table's own grid {grid}"]
        for key, value in self.prefer:
            kept = [c for c in pool if prefer_matches(c, key, value)]
            if kept and len(kept) < len(pool):
                pool = kept
                rules.append(f"--prefer {key}={value}")
        differing = distinguishing(pool)
        if differing:
            why = AmbiguousVariant((model, benchmark, strategy), pool, differing)
            if self.strict:
                raise why
            if all(u.wanted != why.wanted for u in self.unsettled):
                self.unsettled.append(why.plain())
            return Unsettled(why)
        chosen = min(pool, key=lambda c: (c.limit is not None, -c.n, c.seed or 0, c.grid, c.key))
        replicates = tuple(c for c in pool if c is not chosen and c.seed != chosen.seed)
        self.picked.append(Pick(chosen, tuple(c for c in matches if c is not chosen), tuple(rules), distinguishing(matches), replicates))
        return chosen

    def probe(self, model: str, benchmark: str, n_preferred: int = 100) -> ProbeRecord | None:
        """The probe for a pair, preferring the paper's n = 100, then the largest n."""
        matches = [p for p in self.probes if (p.model, p.benchmark) == (model, benchmark)]
        return min(matches, key=lambda p: (p.n != n_preferred, -p.n)) if matches else None


# --- choosing among variants -------------------------------------------------------------------

VARIANT_RULE = (
    "One table cell, several finished cells (same model × benchmark × strategy): the table's own grid first, then each "
    "`--prefer KEY=VALUE`; cells that still differ in a setting their key covers (backend, prompts, temperature, reading, k, ...) "
    "are variants: the table does not guess between them but shows the cell as `(N variants)` and lists each with the `--prefer` "
    "that picks it (`--strict`: refuses); among cells of one variant, a full run before a limit-ed one, then the largest n, "
    "then seed 0; replicates of another seed are set aside and named with their values."
)
# Not variants: the lookup's own names, the size rule's, and the metric version (read under today's names).
_NOT_VARIANT = frozenset({"model.name", "benchmark.name", "strategy.name", "limit", "seed", "metric_version"})
# A group named alone in --prefer means its name (``backend=vllm``: ``backend.name=vllm``).
_PREFER_GROUPS = ("model", "backend", "benchmark", "retriever", "strategy", "reading")


@dataclass(frozen=True)
class Pick:
    """A cell :meth:`Results.find` returned, the other matches, the rules that set them aside and what they differ in."""

    cell: StoredCell
    others: tuple[StoredCell, ...]
    rules: tuple[str, ...]
    differing: tuple[str, ...]
    replicates: tuple[StoredCell, ...] = ()  # cells of the chosen one's variant run with another seed, set aside

    def label(self) -> str:
        """The chosen cell's distinguishing settings (``backend.name=vllm``), or its key."""
        values = self.cell.settings
        shown = [f"{k}={_text(values.get(k))}" for k in self.differing]
        return ", ".join(shown) if shown else self.cell.key


class Unsettled:
    """:meth:`Results.find`'s answer where no rule settles the variants: falsy and valueless, so a
    table reads no number; the table helpers show it as ``(N variants)``."""

    em = f1 = contains = n = assessment = None
    degraded = False

    def __init__(self, why: "AmbiguousVariant"):
        self.why = why
        self.variants = why.variants

    def __bool__(self) -> bool:
        return False

    def predictions(self) -> None:
        return None

    calls_per_query = predictions


class Variants(NamedTuple):
    """An unsettled table cell as plain text (a table's ``attrs``, the verbs' warnings): each candidate's ``--prefer`` and folder."""

    wanted: tuple[str, str, str]
    count: int
    differing: tuple[str, ...]
    picks: tuple[tuple[str, str], ...]  # (the --prefer that picks it, grid/folder)

    def line(self) -> str:
        return (f"{' × '.join(self.wanted)}: {self.count} variants differing in {', '.join(self.differing)}, not guessed; pick one with "
                + "; ".join(f"`{prefer}` ({where})" for prefer, where in self.picks))


class AmbiguousVariant(ValueError):
    """Several variants could fill one table cell; ``candidates``: (cell, its ``--prefer``, its distinguishing settings)."""

    def __init__(self, wanted: tuple[str, str, str], cells: Sequence[StoredCell], differing: tuple[str, ...]):
        self.wanted, self.differing = wanted, differing
        self.candidates = [(c, picking_prefer(c, cells, differing), {k: c.settings.get(k) for k in differing}) for c in cells]
        self.variants = variants = len({tuple(_text(c.settings.get(k)) for k in differing) for c in cells})
        counted = f" ({len(cells)} cells)" if len(cells) != variants else ""
        super().__init__(
            f"{variants} variants of {' × '.join(wanted)}{counted} could fill a table cell, differing in {', '.join(differing)}; "
            f"madara does not guess: pick one with --prefer KEY=VALUE (candidates below)"
        )

    def plain(self) -> Variants:
        return Variants(self.wanted, self.variants, self.differing,
                        tuple((prefer, f"{c.grid}/{c.path.name}") for c, prefer, _ in self.candidates))

    def candidate_lines(self) -> list[str]:
        """Per candidate: its ``--prefer`` (and ``grid=G`` where that grid is its alone), settings the
        ``--prefer`` does not say, and its folder."""
        grids = [c.grid for c, _, _ in self.candidates]
        lines = []
        for cell, prefer, values in self.candidates:
            settings = ", ".join(f"{k}={_text(v)}" for k, v in values.items())
            also = f" (or --prefer grid={cell.grid})" if grids.count(cell.grid) == 1 else ""
            shown = "" if prefer == f"--prefer {settings}" else f"   ({settings})"
            lines.append(f"  {prefer}{also}{shown}   {cell.path}")
        return lines


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def distinguishing(cells: Sequence[StoredCell]) -> tuple[str, ...]:
    """The settings all ``cells`` have that differ among them (the prompt families' digests only with the set's own)."""
    if len(cells) < 2:
        return ()
    views = [c.settings for c in cells]
    shared = set(views[0]).intersection(*views[1:]) - _NOT_VARIANT
    out = sorted(k for k in shared if len({_text(v[k]) for v in views}) > 1)
    if "prompts" in out:  # one digest names the set's difference; the families' say the same again
        out = [k for k in out if not k.startswith("prompts.")]
    return tuple(out)


def prefer_matches(cell: StoredCell, key: str, value: str) -> bool:
    """Whether ``cell``'s setting ``key`` (``grid``: its folder; a group alone: its name) equals ``value`` (numbers as numbers)."""
    if key == "grid":
        return cell.grid == value
    key = f"{key}.name" if key in _PREFER_GROUPS else key
    settings = cell.settings
    if key not in settings:
        return False
    have = settings[key]
    if isinstance(have, (int, float)) and not isinstance(have, bool):
        try:
            return math.isclose(float(have), float(value))
        except ValueError:
            return False
    return _text(have) == value


def picking_prefer(cell: StoredCell, cells: Sequence[StoredCell], differing: Sequence[str]) -> str:
    """``--prefer KEY=VALUE`` (one or more) that leaves ``cell``'s variant alone among ``cells``."""
    mine = {k: _text(cell.settings.get(k)) for k in differing}
    for k in differing:  # one setting that is this cell's alone
        if sum(1 for c in cells if _text(c.settings.get(k)) == mine[k]) == sum(1 for c in cells if _same_variant(c, cell, differing)):
            return f"--prefer {k}={mine[k]}"
    return " ".join(f"--prefer {k}={v}" for k, v in mine.items())


def _same_variant(a: StoredCell, b: StoredCell, differing: Sequence[str]) -> bool:
    return all(_text(a.settings.get(k)) == _text(b.settings.get(k)) for k in differing)


def parse_prefer(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings as pairs; ValueError naming one that is not of that form."""
    out = []
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"--prefer {item}: expected KEY=VALUE (a setting of summary.csv, e.g. backend.name=vllm, or grid=NAME)")
        out.append((key.strip(), value.strip()))
    return tuple(out)


# The NF EM tables 8, 9, 19 route on: the probe's over its calibration queries (as strategy=madara;
# Section 4: "The NF threshold is estimated from the RSC calibration set"), or the NF cell's.
ROUTING_NF_SOURCES = ("calibration", "full")


def load_results(results_dir: Path | str, metric: str = "em", routing_nf: str = "calibration",
                 prefer: Sequence[tuple[str, str]] = (), strict: bool = False) -> Results:
    """Scan ``results/<grid>/<cell>/`` and ``results/probes/*/`` for finished records.

    ``metric``: each cell's score (``em``, ``em_strict``, ``f1``, ``contains``; ``em_squad`` is
    ``em``); ``routing_nf``: :data:`ROUTING_NF_SOURCES`; ``prefer``/``strict``: :data:`VARIANT_RULE`.
    Dot folders (``.tmp-*``, runs in progress) are ignored; a folder with cell files but no
    readable record, or a probe folder without a readable ``probe.json``, is listed in
    ``skipped`` (its reason in ``problems``) for the caller to name, never read nor fatal.
    """
    metric = metric_name(metric)
    if routing_nf not in ROUTING_NF_SOURCES:
        raise ValueError(f"unknown routing NF source '{routing_nf}'; valid: {', '.join(ROUTING_NF_SOURCES)}")
    root = Path(results_dir)
    cells: list[StoredCell] = []
    probes: list[ProbeRecord] = []
    problems: list[tuple[str, str]] = []
    if not root.is_dir():
        return Results(root, (), (), routing_nf=routing_nf, prefer=tuple(prefer), strict=strict)
    for grid_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            subs = sorted(p for p in grid_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as e:
            problems.append((str(grid_dir), f"cannot be read ({e.strerror or e})"))
            continue
        for sub in subs:
            if grid_dir.name == PROBES_GRID:
                try:
                    probe = read_probe(sub, require=("model", "benchmark"))
                    why = f"has no {PROBE_FILE}"
                except (RecordError, OSError) as e:
                    probe, why = None, str(e)
                if probe is None:
                    problems.append((str(sub), why))
                else:
                    probes.append(probe)
                continue
            if not is_finished_cell(sub):
                if (problem := folder_problem(sub)) is not None:
                    problems.append((str(sub), problem))
                continue
            try:
                record = read_cell(sub, grid_dir.name)
            except RecordError as e:
                problems.append((str(sub), record_problem(e, sub)))
                continue
            cells.append(StoredCell(record, sub, metric))
    if prefer and cells:  # a key no cell has would choose nothing, silently (--prefer bogus.key=1 was taken)
        known = {"grid", *_PREFER_GROUPS}.union(*(c.settings for c in cells))
        for key, value in prefer:
            if key not in known:
                raise ConfigError(f"--prefer {key}={value}: no cell in {root} has a setting {key}; valid: {', '.join(sorted(known))}")
    return Results(root, tuple(cells), tuple(probes), tuple(p for p, _ in problems), tuple(problems), routing_nf, tuple(prefer), strict)


# --- a prediction row's supporting chain (MuSiQue) ---------------------------------------------

_HOPS = re.compile(r"^(\d+)hop")


def hop_count(example_id: Any) -> int | None:
    """The chain length MuSiQue's id prefix names (``2hop__``: one paragraph per hop, as ``meta["hops"]``), else None."""
    match = _HOPS.match(str(example_id))
    return int(match.group(1)) if match else None


class Support(NamedTuple):
    """How much of a query's gold supporting chain a strategy kept (Table 17, App. J)."""

    found: int | None  # supporting documents among the kept ones
    complete: bool | None  # whether the whole chain was kept


def support_in_topk(row: Mapping[str, Any]) -> Support:
    """The one reading of a row's ``extra.supporting_in_topk``: a count beside
    ``extra.n_supporting`` (:func:`madara_cli.strategies.context.support_coverage`); older rows
    hold a bool, a list of bools, a fraction, or a count whose total is :func:`hop_count`'s."""
    extra = row.get("extra") or {}
    value = extra.get("supporting_in_topk")
    total = extra.get("n_supporting", extra.get("supporting_total"))
    if total is None and (hops := hop_count(row.get("id", ""))) is not None:
        total = hops
    if isinstance(value, bool):
        return Support(None, value)
    if isinstance(value, (list, tuple)):
        return Support(sum(bool(v) for v in value), all(bool(v) for v in value) and len(value) > 0)
    if isinstance(value, int):
        return Support(value, (value >= int(total)) if total else None)
    if isinstance(value, float):
        return Support(round(value * total) if total else None, value >= 1.0 - 1e-9)
    return Support(None, None)
