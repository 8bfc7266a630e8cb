"""The benchmark loader registry: ``benchmark.loader`` names one of these.

A loader is ``fn(cfg: BenchmarkConfig) -> list[Example]`` returning the whole (source)
split in a stable order; :mod:`madara_cli.data.splits` then draws the seeded sample.
Loaders register themselves with ``@LOADERS.register(name)`` when their module is
imported. This module imports no loader: whoever looks one up first loads them
(:func:`madara_cli.data.loader_plugins.load_all`: the built-in modules and the
``madara.loaders`` entry points of installed packages).
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from madara_cli.records import Example
from madara_cli.registry import Registry

Loader = Callable[[DictConfig], list[Example]]

LOADERS: Registry[Loader] = Registry("benchmark loader")
