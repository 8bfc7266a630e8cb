"""Finding a benchmark loader: :func:`load_all` imports the built-in loader modules
(each registers its loaders into :data:`~madara_cli.data.loader_registry.LOADERS` at
import), so the registry itself imports no loader and no circle runs through it.
"""

from __future__ import annotations

from madara_cli.data.loader_registry import LOADERS, Loader
from madara_cli.data.sources import DataError


def load_all() -> None:
    """Register every built-in loader."""
    import madara_cli.data.benchmarks  # noqa: F401  (each built-in loader module registers at import)


def find_loader(name: str) -> Loader:
    """The loader registered as ``name``, after :func:`load_all`; an unknown name is one
    line listing the known ones."""
    load_all()
    if name not in LOADERS:
        raise DataError(f"unknown benchmark loader '{name}'; valid: {', '.join(LOADERS.names())}")
    return LOADERS.get(name)
