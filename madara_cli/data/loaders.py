"""Benchmark loaders into :class:`Example` records, and the paper's sampling.

A loader is ``fn(cfg: BenchmarkConfig) -> list[Example]`` returning the whole
(source) split in a stable order; :func:`load_benchmark` then draws the seeded
evaluation sample and the disjoint calibration split.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from omegaconf import DictConfig

from madara_cli.records import Example
from madara_cli.registry import Registry


class DataError(ValueError):
    """Missing or unreadable benchmark data; printed as one line, exit 2."""


LOADERS: Registry[Callable[[DictConfig], list[Example]]] = Registry("benchmark loader")


@LOADERS.register("mini")
def _mini(cfg: DictConfig) -> list[Example]:
    from madara_cli.data.mini import generate

    return generate(n_questions=cfg.n_questions, seed=0)


def split(examples: Sequence[Example], sample: int | None, calibration: int, seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded shuffle; the first ``calibration`` examples form the calibration split
    (RSC probe and NF calibration), the next ``sample`` the evaluated set. The two
    never overlap. ``sample=None`` evaluates everything after the calibration split;
    when the source is smaller than calibration + sample, calibration is taken
    from what is left after the evaluated sample so the evaluation set keeps its size."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    n = len(order)
    if sample is None or sample + calibration <= n:
        calib = order[:calibration]
        evaluated = order[calibration:] if sample is None else order[calibration : calibration + sample]
    else:
        evaluated = order[: min(sample, n)]
        calib = order[len(evaluated) :][:calibration]
    return evaluated, calib


def load_benchmark(cfg: DictConfig, seed: int, which: str = "eval") -> list[Example]:
    """The evaluated (``which="eval"``) or calibration (``"calibration"``) examples."""
    import madara_cli.data.benchmarks  # noqa: F401  (registers the real loaders)

    try:
        loader = LOADERS.get(cfg.loader)
    except KeyError as e:
        raise DataError(str(e.args[0])) from None
    examples = loader(cfg)
    if not examples:
        raise DataError(f"benchmark {cfg.name}: no examples loaded")
    evaluated, calib = split(examples, cfg.sample, cfg.calibration, seed)
    return evaluated if which == "eval" else calib
