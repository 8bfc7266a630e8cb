"""Benchmark loaders: ``benchmark.loader`` names one. Every module of this package registers
the :class:`LoaderSpec` of one or more loaders in the one catalog (the one loader,
:func:`madara_cli.composition.plugins.load_plugins`, imports them; an installed package's
come through the ``madara.loaders`` entry point group, a folder of your own through
``--include``).

A loader is ``load(cfg: BenchmarkConfig) -> list[Example]``: the whole (source) split in a
stable order; :mod:`madara_cli.data.splits` then draws the seeded sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from madara_cli.config.settings import Settings
from madara_cli.core.records import Example
from madara_cli.plugins.shape import Spec

Loader = Callable[[Settings], list[Example]]


@dataclass(frozen=True, kw_only=True)
class LoaderSpec(Spec):
    """One benchmark loader: what every plug-in declares, plus ``load`` (and ``offline``: the words
    for a loader that makes its own questions, so shared code names no loader). Its settings are
    the benchmark node's (:class:`~madara_cli.config.schema.BenchmarkConfig`)."""

    kind: ClassVar[str] = "loader"

    load: Loader
    offline: str = ""  # where its questions come from when it needs no file and no hub (madara ls says so)
