"""Benchmark loaders: ``benchmark.loader`` names one. Each is one module of this package that
registers its :class:`LoaderSpec` in the one catalog (``mini_loader``, ``conflicts``, ``conflictqa``,
``fever``, ``triviaqa``, ``popqa``, ``musique_loader``, ``arc_challenge``, ``asqa``, ``own_data``:
jsonl; :mod:`~madara_cli.data.loaders.rows` holds what they share). The one loader,
:func:`madara_cli.composition.plugins.load_plugins`, imports them; an installed package's come
through the ``madara.loaders`` entry point group, a folder of your own through ``--include``.

A loader is ``load(benchmark node) -> list[Example]``: the whole (source) split in a
stable order; :mod:`madara_cli.data.splits` then draws the seeded sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from madara_cli.config.settings import Node
from madara_cli.core.records import Example
from madara_cli.plugins.shape import Spec

Loader = Callable[[Node], list[Example]]


@dataclass(frozen=True, kw_only=True)
class LoaderSpec(Spec):
    """One benchmark loader: what every plug-in declares, plus ``load`` (and ``offline``: the words
    for a loader that makes its own questions, so shared code names no loader). It reads the
    benchmark node: composition lays its ``schema`` (a dataclass extending
    :class:`~madara_cli.config.schema.BenchmarkConfig` with the settings it alone reads; that one
    where it names none) over the node that names it; its ``ranges`` are checked on that node, its
    ``checks`` run on the composed config."""

    kind: ClassVar[str] = "loader"
    node: ClassVar[str] = "benchmark"

    load: Loader
    offline: str = ""  # where its questions come from when it needs no file and no hub (madara ls says so)
