"""Finding a benchmark loader: the built-in ones and those of installed packages.

:func:`load_all` imports the built-in loader modules (each registers its loaders into
:data:`~madara_cli.data.loader_registry.LOADERS`) and then every entry point of the
group ``madara.loaders``: an installed package declares, in its ``pyproject.toml``::

    [project.entry-points."madara.loaders"]
    mydata = "mydata.loaders"            # a module whose import registers loaders
    # or  mydata = "mydata:register"     # a callable, called with no arguments

and a benchmark YAML with ``loader: <a name it registers>`` uses it. A plug-in that
cannot be imported, fails while registering or registers a name that is taken stops
the lookup in one line naming its entry point.
"""

from __future__ import annotations

import inspect
from importlib.metadata import EntryPoint, entry_points

from madara_cli.data.loader_registry import LOADERS, Loader
from madara_cli.errors import DataError

ENTRY_POINT_GROUP = "madara.loaders"

_LOADED_ENTRY_POINTS: set[tuple[str, str]] = set()


def load_all() -> None:
    """Register every loader: the built-in modules, then each ``madara.loaders`` entry
    point not loaded before in this process (so a package put on ``sys.path`` later
    is still found)."""
    import madara_cli.data.benchmarks  # noqa: F401  (each built-in loader module registers at import)
    import madara_cli.data.own_data  # noqa: F401
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in _LOADED_ENTRY_POINTS:
            continue
        _load_entry_point(ep)
        _LOADED_ENTRY_POINTS.add((ep.name, ep.value))


def _load_entry_point(ep: EntryPoint) -> None:
    where = f"loader plug-in '{ep.name} = {ep.value}' (entry point group {ENTRY_POINT_GROUP})"
    try:
        obj = ep.load()
        if callable(obj) and not inspect.ismodule(obj):
            obj()
    except Exception as e:  # noqa: BLE001 - a plug-in's own failure, named in one line
        text = " ".join(str(e).split()) or type(e).__name__
        raise DataError(f"{where} failed to load: {type(e).__name__}: {text}") from None


def find_loader(name: str) -> Loader:
    """The loader registered as ``name``, after :func:`load_all`; an unknown name is one
    line listing the known ones."""
    load_all()
    if name not in LOADERS:
        raise DataError(
            f"unknown benchmark loader '{name}'; valid: {', '.join(LOADERS.names())} "
            f"(a loader of your own registers through a '{ENTRY_POINT_GROUP}' entry point of an installed package)"
        )
    return LOADERS.get(name)
