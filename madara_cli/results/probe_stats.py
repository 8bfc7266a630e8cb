"""The statistics of one RSC probe, typed once: :func:`madara_cli.diagnose.rsc.summarize_probe`
computes a :class:`ProbeStats`, ``probe.json`` holds it (a ProbeRecord is one plus the
Diagnose arm) and the store reads it back into the same classes.

Values are held as written (lists; None where undefined, NaN or inf), so a computed record
equals the one read from its file; unknown keys stay in ``extra``, written back in place.
Sources: the paper's Section 3 (Eqs. 1-2), Appendix F.2-F.3, G.2 (Table 13), Section 6.2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np


def json_safe(value: Any) -> Any:
    """``value`` as a probe writes it: NaN/inf None, arrays and tuples lists, numpy scalars Python's, keys strings."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


@dataclass(frozen=True)
class Section:
    """A nested section of a probe: known keys as fields in written order, the rest in ``extra``."""

    JSON_NAMES: ClassVar[dict[str, str]] = {}
    # Fields added later: left out while None, so an older file writes back unchanged.
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_dict(cls, d: Any):
        if not isinstance(d, Mapping):
            return None
        names = [f.name for f in fields(cls) if f.name != "extra"]
        json_names = {n: cls.JSON_NAMES.get(n, n) for n in names}
        known = set(json_names.values())
        return cls(**{n: d.get(j) for n, j in json_names.items()}, extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out = {
            self.JSON_NAMES.get(f.name, f.name): getattr(self, f.name)
            for f in fields(self)
            if f.name != "extra" and not (f.name in self.OMIT_WHEN_NONE and getattr(self, f.name) is None)
        }
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class PerQuery(Section):
    """Per-query Spearman rho per level (F.2, Table 10): mean and std (ddof=1) where defined, and each
    query's value (None: fewer than two valid documents, or constant scores)."""

    mean: list | None = None  # per level
    std: list | None = None
    values: list | None = None  # per level: one rho per query
    extra: dict = field(default_factory=dict)

    @property
    def n_defined(self) -> tuple[int, ...]:
        """Queries with a defined rho, per level."""
        return tuple(sum(v is not None for v in level) for level in self.values or ())


@dataclass(frozen=True)
class Bootstrap(Section):
    """Percentile bootstrap over queries (Table 13): ``ci[k]`` rho_k's 95% interval ([None, None]:
    undefined), ``stability`` the share of resamples classed as the full sample, ``class_shares`` per class."""

    ci: list | None = None  # per level: [low, high]
    stability: float | None = None
    class_shares: dict | None = None
    n_resamples: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SplitHalf(Section):
    """The RSC class of the first and of the last half of the queries (F.3, Table 11)."""

    first: str | None = None
    last: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return self.first == self.last


@dataclass(frozen=True)
class Subsets(Section):
    """Percent (0-100) of random 30-query subsets in each class (Table 11)."""

    JSON_NAMES: ClassVar[dict[str, str]] = {"quality_ordered": "quality-ordered"}
    quality_ordered: float | None = None
    stochastic: float | None = None
    degenerate: float | None = None
    size: int | None = None
    n_subsets: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Degeneracy(Section):
    """Whether the scores are too concentrated for rank correlations to mean anything (Section 6.2;
    Table 4's Llama-3.1 TriviaQA: 98% at the floor); shares and mean None when no score parsed."""

    is_degenerate: bool | None = None
    floor_share: float | None = None
    ceiling_share: float | None = None
    mean_score: float | None = None
    reason: str | None = None
    extra: dict = field(default_factory=dict)


# Each section's field name in a probe record and the class that reads it.
STATS_SECTIONS: dict[str, type[Section]] = {
    "per_query": PerQuery, "bootstrap": Bootstrap, "split_half": SplitHalf, "subsets30": Subsets, "degenerate": Degeneracy,
}


@dataclass(frozen=True, kw_only=True)
class ProbeStats:
    """Every statistic of one RSC probe (Tables 4, 10, 11, 13, entropy) in ``probe.json``'s order.
    Degenerate scores or an undefined rho_k: ``rsc_class`` "degenerate", every rho-derived field
    None. ``subsets30`` is None below a subset's size; a damaged file may lack any field."""

    rho: list | None = None  # pooled rho_1..3 (shuffled, contradicted, random)
    p_values: list | None = None
    rho_star: float | None = None
    rho_bar: float | None = None
    rsc_class: str | None = None
    coupling: str | None = None  # strong | weak for a quality-ordered pair
    per_query: PerQuery | None = None
    bootstrap: Bootstrap | None = None
    split_half: SplitHalf | None = None
    subsets30: Subsets | None = None
    degenerate: Degeneracy | None = None
    entropy: float | None = None
    n_queries: int | None = None
    n_pairs: int | None = None
    seed: int | None = None

    @staticmethod
    def names() -> tuple[str, ...]:
        """The statistics' field names, in the order they are written."""
        return tuple(f.name for f in fields(ProbeStats))

    def to_dict(self) -> dict[str, Any]:
        """The statistics as ``probe.json`` lays them out."""
        return {name: _written(getattr(self, name)) for name in ProbeStats.names()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProbeStats":
        """The statistics of a stored probe, sections typed (absent: None)."""
        return ProbeStats(**read_stats(d))

    @property
    def is_degenerate(self) -> bool:
        return bool(self.degenerate and self.degenerate.is_degenerate)


def _written(value: Any) -> Any:
    return value.to_dict() if isinstance(value, Section) else value


def read_stats(d: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`ProbeStats` fields of a stored probe, sections typed (absent: None)."""
    return {name: STATS_SECTIONS[name].from_dict(d.get(name)) if name in STATS_SECTIONS else d.get(name) for name in ProbeStats.names()}
