"""The two typed records under ``results/``: :class:`CellRecord` (``<grid>/<key>/metrics.json``)
and :class:`ProbeRecord` (``probes/<key>/probe.json``, its statistics a :class:`ProbeStats`).

``to_dict()`` lays a record out exactly as madara has always written it (two runs compare
byte for byte), ``schema_version`` first; ``from_dict()`` reads every version (no
``schema_version``: version 1). Unknown keys are kept (a cell's ``report``, a probe's
``extra``) and written back where they were.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Mapping

from madara_cli.config.identity import Cell
from madara_cli.core import metrics as M
from madara_cli.core.errors import RecordError
from madara_cli.results.health import Health, cell_health
from madara_cli.results.probe_stats import STATS_SECTIONS, ProbeStats, Section

SCHEMA_VERSION = 2  # 1: before the results store (no schema_version key); 2: the same, schema_version first

METRICS = M.METRICS


def to_json(obj: Mapping[str, Any], ensure_ascii: bool = False) -> str:
    """Indented strict JSON (no NaN) and a newline (cells keep non-ASCII, probes have always escaped it)."""
    return json.dumps(obj, indent=2, ensure_ascii=ensure_ascii, allow_nan=False) + "\n"


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return float(x)
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _version(data: Mapping[str, Any], path: Path | str | None) -> int:
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"{path or 'record'}: schema_version {version!r} is not a version number")
    if version > SCHEMA_VERSION:
        raise RecordError(f"{path or 'record'}: written by a newer madara (schema_version {version}; this one reads up to {SCHEMA_VERSION})")
    return version


def timing_section(accounting: dict[str, Any], wall_seconds: float) -> dict[str, Any]:
    """Move the engine seconds out of ``accounting`` (in place) into a ``timing`` section,
    written apart so the rest of the record compares byte for byte between runs."""
    by_stage = {name: st.pop("seconds", 0.0) for name, st in accounting.get("by_stage", {}).items()}
    return {"wall_seconds": round(wall_seconds, 3), "engine_seconds": accounting.pop("seconds", 0.0), "engine_seconds_by_stage": by_stage}


# --- a cell -----------------------------------------------------------------------------------

# Sections of metrics.json that are not the strategy's report.
_CELL_KEYS = ("schema_version", "cell", "n", *METRICS, "evaluated_set", "empty_answers", "data", "accounting", "health", "provenance", "timing")


def _check_measures(d: Mapping[str, Any], path: Path | str | None) -> int:
    """The record's ``n`` once it is a count and the metrics fractions in [0, 1] (``em``
    always), so a damaged value is named instead of shown in a table as "—" or 0 queries."""
    where = path or "record"
    n = d.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise RecordError(f"{where}: n {n!r} is not a count of queries")
    for name in METRICS:
        value = d.get(name)
        if value is None and name != "em":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise RecordError(f"{where}: {name} {value!r} is not a fraction in [0, 1]")
    return n


def cell_from_dict(d: Mapping[str, Any], grid: str = "", key: str = "") -> tuple[Cell, str]:
    """A :class:`Cell` from a stored ``cell`` section, and its stored key (older ones may differ from today's hash)."""
    key = str(d.get("key") or key)
    config_hash = key.rsplit("__", 1)[-1] if "__" in key else ""
    cell = Cell(
        grid=str(d.get("grid") or grid), model=str(d.get("model") or ""), benchmark=str(d.get("benchmark") or ""),
        strategy=str(d.get("strategy") or ""), retriever=str(d.get("retriever") or "bm25s"),
        k=d.get("k"), seed=d.get("seed"), limit=d.get("limit"), config_hash=config_hash,
    )
    return cell, key or cell.key


@dataclass(frozen=True)
class CellRecord:
    """A finished cell; ``report`` holds the strategy's own sections in the order it wrote them."""

    cell: Cell
    n: int
    em: float | None
    em_strict: float | None = None
    f1: float | None = None
    contains: float | None = None
    evaluated_set: dict[str, Any] | None = None
    empty_answers: int | None = None
    report: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    accounting: dict[str, Any] = field(default_factory=dict)
    # results/health.py; an older record gets the health its sections imply (recorded=False, not written back)
    health: Health | None = None
    provenance: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    stored_key: str | None = None  # set only when the stored key differs from cell.key
    schema_version: int = field(default=SCHEMA_VERSION, compare=False)  # the version it was read as; written as SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.health is None:
            object.__setattr__(self, "health", cell_health(self.report, self.accounting, recorded=False))

    # --- identity, as the tables name it
    @property
    def key(self) -> str:
        return self.stored_key or self.cell.key

    grid = property(lambda self: self.cell.grid)
    model = property(lambda self: self.cell.model)
    benchmark = property(lambda self: self.cell.benchmark)
    strategy = property(lambda self: self.cell.strategy)
    retriever = property(lambda self: self.cell.retriever)
    k = property(lambda self: self.cell.k)
    seed = property(lambda self: self.cell.seed)
    limit = property(lambda self: self.cell.limit)

    # --- typed views of sections
    def metric(self, name: str) -> float | None:
        """A metric by name (``em_squad``, its name before METRIC_VERSION 3, is ``em``); ValueError for an unknown one."""
        return getattr(self, M.metric_name(name))

    @property
    def assessment(self) -> dict[str, Any]:
        value = self.report.get("assessment")
        return dict(value) if isinstance(value, Mapping) else {}

    @property
    def madara(self) -> dict[str, Any]:
        value = self.report.get("madara")
        return dict(value) if isinstance(value, Mapping) else {}

    @property
    def calibration_split(self) -> str | None:
        return (self.evaluated_set or {}).get("calibration_split")

    @property
    def engine_seconds(self) -> float:
        """Engine seconds: the timing section's, else (older records) the accounting's."""
        if self.timing and "engine_seconds" in self.timing:
            return float(self.timing["engine_seconds"])
        return float(self.accounting.get("seconds", 0) or 0)

    @property
    def seconds(self) -> float | None:
        """Wall seconds of the run: provenance's, else an older record's ``wall_seconds``."""
        if self.provenance and "seconds" in self.provenance:
            return self.provenance["seconds"]
        return self.report.get("wall_seconds")

    def calls_per_query(self) -> float | None:
        """LLM calls per query, cached or not (a cache hit is a call another cell paid for):
        ``requests``, else ``calls_issued + cache_hits``."""
        acc = self.accounting or {}
        if not self.n or not ({"requests", "calls_issued"} & set(acc)):
            return None
        total = acc["requests"] if "requests" in acc else float(acc.get("calls_issued", 0)) + float(acc.get("cache_hits", 0))
        return float(total) / self.n

    # --- JSON
    def to_dict(self) -> dict[str, Any]:
        cell = self.cell.to_dict()
        cell["key"] = self.key
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "cell": cell, "n": self.n}
        for name in (*METRICS, "evaluated_set", "empty_answers"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        out.update(self.report)
        if self.data is not None:
            out["data"] = self.data
        out["accounting"] = self.accounting
        if self.health is not None and self.health.recorded:
            out["health"] = self.health.to_dict()
        # Provenance and timing close the record: the rest is a function of config, data and seed.
        if self.provenance is not None:
            out["provenance"] = self.provenance
        if self.timing is not None:
            out["timing"] = self.timing
        return out

    def to_json(self) -> str:
        return to_json(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], grid: str = "", key: str = "", path: Path | str | None = None) -> "CellRecord":
        """Read a stored record (any schema version); ``grid``/``key`` (the folder names) fill a
        ``cell`` section that lacks them. RecordError when it names no model, benchmark and strategy."""
        if not isinstance(d, Mapping):
            raise RecordError(f"{path or 'record'}: not a JSON object")
        version = _version(d, path)
        section = d.get("cell")
        if not isinstance(section, Mapping) or not all(section.get(k) for k in ("model", "benchmark", "strategy")):
            raise RecordError(f"{path or 'record'}: no cell section naming model, benchmark and strategy")
        cell, stored = cell_from_dict(section, grid, key)
        n = _check_measures(d, path)
        return cls(
            cell=cell,
            n=n,
            **_metric_values(d),
            evaluated_set=d.get("evaluated_set") if isinstance(d.get("evaluated_set"), Mapping) else None,
            empty_answers=d.get("empty_answers"),
            report={k: v for k, v in d.items() if k not in _CELL_KEYS and k not in M.METRIC_ALIASES},
            data=d.get("data") if isinstance(d.get("data"), Mapping) else None,
            accounting=dict(d.get("accounting") or {}),
            health=Health.from_dict(d["health"]) if isinstance(d.get("health"), Mapping) else None,
            provenance=d.get("provenance") if isinstance(d.get("provenance"), Mapping) else None,
            timing=d.get("timing") if isinstance(d.get("timing"), Mapping) else None,
            stored_key=None if stored == cell.key else stored,
            schema_version=version,
        )

    @classmethod
    def from_json(cls, text: str, grid: str = "", key: str = "", path: Path | str | None = None) -> "CellRecord":
        return cls.from_dict(_loads(text, path), grid, key, path)


def _metric_values(d: Mapping[str, Any]) -> dict[str, Any]:
    """A stored cell's metrics under today's names: METRIC_VERSION 2's ``em`` (strict) and
    ``em_squad`` become ``em_strict`` and ``em``, so no table mixes the two (version 1's ``em`` is ``em``)."""
    values = {name: d.get(name) for name in METRICS}
    if "em_squad" in d and "em_strict" not in d:
        values["em"], values["em_strict"] = d.get("em_squad"), d.get("em")
    return values


def _loads(text: str, path: Path | str | None) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise RecordError(f"{path or 'record'} is not readable JSON ({' '.join(str(e).split())})") from None


# --- a probe ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeScores(Section):
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"chains_empty", "n_pairs_probed", "cot_cut_at_max_tokens"})
    normal: list | None = None
    parse_failures_normal: int | None = None
    parse_failures_rescored: int | None = None
    n_pairs: int | None = None
    chains_from_raw_text: int | None = None
    chains_empty: int | None = None  # pairs left out: no reasoning once score fields were removed
    n_pairs_probed: int | None = None  # pairs perturbed and re-scored (n_pairs - chains_empty)
    cot_cut_at_max_tokens: int | None = None  # CoT replies that stopped at generation.cot_max_tokens
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration(Section):
    n: int | None = None
    split: str | None = None
    rule: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class IsolationProbe(Section):
    """``rsc.isolation_probe``: PDE-Random against NF on the calibration queries (EMs, gain in
    percent; ``b``/``c``: queries only PDE-Random/only NF gets right; route by ``router.route_isolation``)."""

    strategy: str | None = None
    top_k: int | None = None
    em_nf: float | None = None
    em_iso: float | None = None
    gain: float | None = None
    n: int | None = None
    b: int | None = None
    c: int | None = None
    p_value: float | None = None
    test: str | None = None
    source: str | None = None
    requests: int | None = None
    route: str | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


_SECTIONS: dict[str, type[Section]] = {**STATS_SECTIONS, "scores": ProbeScores, "calibration": Calibration, "isolation": IsolationProbe}
_PROBE_HEAD = ("model", "benchmark", "n", "key", "config_hash")
_STATS = frozenset(ProbeStats.names())
# What strategy=madara needs of a probe.
ROUTE_FIELDS = ("route", "reason", "em_nf", "rsc_class")


def _at(values: Any, i: int) -> Any:
    return values[i] if isinstance(values, (list, tuple)) and 0 <= i < len(values) else None


@dataclass(frozen=True, kw_only=True)
class ProbeRecord(ProbeStats):
    """An RSC probe (:func:`madara_cli.diagnose.probe.run_probe`): identity, the inherited
    :class:`ProbeStats`, the Diagnose arm, accounting, timing and provenance, written in that order."""

    model: str
    benchmark: str
    n: int
    key: str | None = None
    config_hash: str | None = None
    # the Diagnose arm
    em_nf: float | None = None  # fraction
    route: str | None = None
    reason: str | None = None
    scores: ProbeScores | None = None
    calibration: Calibration | None = None
    rescore: str | None = None  # rsc.rescore: forced | prefix (None: a probe written before the setting)
    rescoring: str | None = None  # rsc.rescoring: generate | logprob
    isolation: IsolationProbe | None = None  # only when the isolation probe ran
    extra: dict[str, Any] = field(default_factory=dict)  # keys this madara does not know
    accounting: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    schema_version: int = field(default=SCHEMA_VERSION, compare=False)  # the version it was read as; written as SCHEMA_VERSION
    path: Path | None = field(default=None, compare=False)  # where it was read from; never written

    # --- typed, None-safe lookups the tables and the CLI use
    def rho_at(self, level: int) -> float | None:
        return _num(_at(self.rho, level))

    def p_value_at(self, level: int) -> float | None:
        return _num(_at(self.p_values, level))

    def ci_at(self, level: int) -> tuple[float | None, float | None] | None:
        ci = _at(self.bootstrap.ci if self.bootstrap else None, level)
        return (_num(ci[0]), _num(ci[1])) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None

    def per_query_at(self, level: int) -> tuple[float | None, float | None]:
        """(mean, std) of the per-query rho at a level."""
        pq = self.per_query
        return (_num(_at(pq.mean, level)), _num(_at(pq.std, level))) if pq else (None, None)

    def per_query_values(self) -> list:
        return list(self.per_query.values or []) if self.per_query else []

    @property
    def stability(self) -> float | None:
        return _num(self.bootstrap.stability) if self.bootstrap else None

    def missing(self, names: tuple[str, ...] = ROUTE_FIELDS) -> list[str]:
        """The fields among ``names`` the record lacks (an empty model or benchmark counts)."""
        return [k for k in names if getattr(self, k) is None or (k in ("model", "benchmark") and not getattr(self, k))]

    # --- JSON
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, **{name: getattr(self, name) for name in _PROBE_HEAD}}
        out.update(ProbeStats.to_dict(self))
        for f in fields(self):
            if f.name in _PROBE_HEAD or f.name in _STATS or f.name in ("schema_version", "path", "extra", "accounting", "timing", "provenance"):
                continue
            value = getattr(self, f.name)
            if value is None and f.name in ("rescore", "rescoring", "isolation"):  # added later: older files stay as written
                continue
            out[f.name] = value.to_dict() if isinstance(value, Section) else value
        out.update(self.extra)
        for name in ("accounting", "timing", "provenance"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def to_json(self) -> str:
        return to_json(self.to_dict(), ensure_ascii=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: Path | None = None) -> "ProbeRecord":
        """Read a stored probe (any schema version; absent fields None); RecordError unless an object."""
        if not isinstance(d, Mapping):
            raise RecordError(f"{path or 'probe'}: not a JSON object")
        version = _version(d, path)
        names = {f.name for f in fields(cls)} - {"path", "extra", "schema_version"}
        kw: dict[str, Any] = {}
        for name in names:
            value = d.get(name)
            kw[name] = _SECTIONS[name].from_dict(value) if name in _SECTIONS else value
        n = d.get("n")
        kw["model"], kw["benchmark"] = str(d.get("model") or ""), str(d.get("benchmark") or "")
        kw["n"] = int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else 0
        extra = {k: v for k, v in d.items() if k not in names and k != "schema_version"}
        return cls(**kw, extra=extra, schema_version=version, path=path)

    @classmethod
    def from_json(cls, text: str, path: Path | None = None) -> "ProbeRecord":
        return cls.from_dict(_loads(text, path), path)
