"""A benchmark loaded and split: :func:`load_splits` finds the loader (in the one catalog),
drops rows no cell can score (counted in a :class:`LoadReport`, one warning line, recorded
in metrics.json) and draws the evaluated and calibration examples from one seeded shuffle
(:func:`split`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Example
from madara_cli.core.sidefiles import encodes
from madara_cli.plugins.catalog import CATALOG


@dataclass
class LoadReport:
    """What one load kept and dropped (:func:`load_splits` returns it; the runner copies
    it into ``metrics.json`` under ``data``)."""

    loaded: int = 0
    kept: int = 0
    dropped: dict[str, list[str]] = field(default_factory=dict)  # reason -> example ids

    def drop(self, reason: str, example_id: str) -> None:
        self.dropped.setdefault(reason, []).append(example_id)

    @property
    def n_dropped(self) -> int:
        return sum(len(v) for v in self.dropped.values())

    def summary(self) -> str:
        return "; ".join(f"{len(ids)} with {reason}" for reason, ids in self.dropped.items())

    def warning(self, name: str, require_answers: bool) -> str:
        parts = [f"{len(ids)} with {reason} ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})" for reason, ids in self.dropped.items()]
        hint = "; benchmark.require_answers=false keeps rows without answers" if require_answers and "no gold answer" in self.dropped else ""
        return f"benchmark {name}: dropped {self.n_dropped} of {self.loaded} rows: {'; '.join(parts)}{hint}"

    def to_dict(self) -> dict[str, Any]:
        return {"loaded": self.loaded, "kept": self.kept, "dropped": self.n_dropped, "dropped_ids": {r: list(ids) for r, ids in self.dropped.items()}}


_WARNED: set[str] = set()


def warn(message: str) -> None:
    """One ``warning:`` line on stderr (above any progress bar), once per process."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr, flush=True)


CALIBRATION_SPLITS = ("nested", "disjoint")


def split(examples: Sequence[Example], sample: int | None, calibration: int, seed: int,
          calibration_split: str = "nested") -> tuple[list[Example], list[Example]]:
    """(evaluated, calibration) examples from one seeded shuffle. Calibration (RSC probe, NF
    calibration) is always the first ``calibration`` of the seeded order, so one probe
    serves every cell of a benchmark whatever its sample.

    * ``nested`` (default, the paper's reading): evaluated = the first ``sample``, so it
      holds the calibration queries (Appendix B evaluates CONFLICTS on all 458 and Table
      9's calibration NF equals Table 2's, which needs that).
    * ``disjoint``: evaluated = the next ``sample`` after calibration (held out; CONFLICTS:
      100 + 358); a source of at most ``calibration`` examples is evaluated whole with an
      empty calibration split, so that something is evaluated.

    For a fixed seed a smaller ``sample`` is a prefix of a larger one in both modes.
    """
    if calibration_split not in CALIBRATION_SPLITS:
        raise DataError(f"unknown benchmark.calibration_split '{calibration_split}'; valid: {', '.join(CALIBRATION_SPLITS)}")
    order = list(examples)
    random.Random(seed).shuffle(order)
    if calibration_split == "nested":
        evaluated = order if sample is None else order[:sample]
        return evaluated, order[:calibration]
    n_cal = calibration if len(order) > calibration else 0
    rest = order[n_cal:]
    return (rest if sample is None else rest[:sample]), order[:n_cal]


def load_all_examples(cfg: Node) -> list[Example]:
    """Every example of the source split, after the loader and the answer filter, in
    source order (no sampling)."""
    return load_with_report(cfg)[0]


def load_with_report(cfg: Node) -> tuple[list[Example], LoadReport]:
    """:func:`load_all_examples` plus the report of what was kept and dropped."""
    examples = CATALOG.get("loader", str(cfg.loader)).load(cfg)  # type: ignore[attr-defined]
    report = LoadReport(loaded=len(examples))
    kept = []
    for ex in examples:
        if not ex.question.strip():
            report.drop("empty question", ex.id)
        elif cfg.get("require_answers", True) and not any(a.strip() for a in ex.answers):
            report.drop("no gold answer", ex.id)
        else:
            kept.append(ex)
    examples, report.kept = kept, len(kept)
    if report.dropped:
        warn(report.warning(str(cfg.name), bool(cfg.get("require_answers", True))))
    if not examples:
        raise DataError(f"benchmark {cfg.name}: no examples loaded" + (f" ({report.summary()})" if report.dropped else ""))
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DataError(f"benchmark {cfg.name}: duplicate example id '{ex.id}'")
        seen.add(ex.id)
        # Whatever the loader (the hub, a plug-in): text that is not Unicode (a lone
        # surrogate) would fail later, in the question hash or the engine, mid-run.
        if not encodes([ex.id, ex.question, list(ex.answers), [[d.id, d.title, d.text] for d in ex.docs or ()]]):
            raise DataError(f"benchmark {cfg.name}: example {ex.id!a} holds a lone surrogate (\\ud800-\\udfff): not Unicode text")
    return examples, report


@dataclass
class Splits:
    """One load of a benchmark: the evaluated and calibration examples (see :func:`split`)
    and what the load kept and dropped."""

    evaluated: list[Example]
    calibration: list[Example]
    report: LoadReport


def load_splits(cfg: Node, seed: int) -> Splits:
    """(evaluated, calibration) examples, from one load of the source."""
    examples, report = load_with_report(cfg)
    evaluated, calibration = split(examples, cfg.sample, cfg.calibration, seed, cfg.get("calibration_split", "nested"))
    return Splits(evaluated, calibration, report)


def load_benchmark(cfg: Node, seed: int, which: str = "eval") -> list[Example]:
    """The evaluated (``which="eval"``) or calibration (``"calibration"``) examples."""
    if which not in ("eval", "calibration"):
        raise ValueError(f"which must be 'eval' or 'calibration', not {which!r}")
    splits = load_splits(cfg, seed)
    return splits.evaluated if which == "eval" else splits.calibration
