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

from omegaconf import DictConfig

from madara_cli.errors import DataError
from madara_cli.plugins.catalog import CATALOG
from madara_cli.plugins.shape import Spec
from madara_cli.records import Example

Loader = Callable[[DictConfig], list[Example]]


@dataclass(frozen=True, kw_only=True)
class LoaderSpec(Spec):
    """One benchmark loader: what every plug-in declares, plus ``load``. Its settings are
    the benchmark node's (:class:`~madara_cli.config.schema.BenchmarkConfig`)."""

    kind: ClassVar[str] = "loader"

    load: Loader


def find_loader(name: str) -> Loader:
    """The loader registered as ``name``; an unknown name is one line listing the known ones."""
    spec = CATALOG.find("loader", name)
    if spec is None:
        raise DataError(
            f"unknown benchmark loader '{name}'; valid: {', '.join(CATALOG.names('loader'))} "
            "(a loader of your own registers a LoaderSpec from an --include file or a 'madara.loaders' entry point)"
        )
    return spec.load  # type: ignore[attr-defined]
