"""Loading the plugins: the shipped backends, retrievers and strategies, those of
installed packages (entry points), and those of ``--include DIR`` folders.

Composition reads each option's settings schema from
:mod:`madara_cli.config.plugin_schemas`, which the implementing modules fill when they are
imported; :func:`load_plugins` imports them all. :func:`madara_cli.composition.compose`
runs it once per process (:func:`ensure_loaded`; the CLI asks for a fresh load at
each invocation, :func:`forget_loaded`), so verbs that compose nothing (tables, route,
show) never import the engines and strategies; grids and launcher jobs call it too.

* shipped: every module of ``madara_cli/backends/``, every module of ``madara_cli/retrievers/``
  and every module of ``madara_cli/strategies/`` (no list to edit);
* installed packages: the entry point groups ``madara.backends``, ``madara.retrievers``
  and ``madara.strategies``; an entry point names a module (importing it registers
  what it declares) or an object in one (a ``BackendSpec`` or ``RetrieverSpec`` is
  registered if its module did not);
* ``--include DIR`` (repeatable; ``$MADARA_INCLUDE``, ``os.pathsep``-separated, so
  launcher workers see it too): every ``*.py`` file directly in DIR, imported by file
  path in name order, nothing else (never a file of the results folder, never
  anything ``sys.path`` would find).

A plugin that fails to import or register is one line naming it and what happened:
an exception of any kind, ``BaseException`` subclasses of its own included (exit 2),
``sys.exit`` at import (exit 2, where it used to end the command with the plug-in's own
status having run nothing) or an interrupt (exit 130).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from madara_cli.errors import ConfigError, PluginInterrupted

ENTRY_POINT_GROUPS = ("madara.backends", "madara.retrievers", "madara.strategies")
INCLUDE_ENV = "MADARA_INCLUDE"

_loaded_files: dict[str, str] = {}  # resolved path -> module name
_loaded_entry_points: set[tuple[str, str]] = set()


def add_include(path: str | Path) -> Path:
    """``--include DIR``: checked, and kept in the environment so launcher workers
    import the same folders."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise ConfigError(f"--include {path}: no such folder")
    current = [p for p in os.environ.get(INCLUDE_ENV, "").split(os.pathsep) if p]
    if str(d) not in current:
        os.environ[INCLUDE_ENV] = os.pathsep.join([*current, str(d)])
    return d


def include_dirs() -> list[Path]:
    dirs = [Path(p).expanduser() for p in os.environ.get(INCLUDE_ENV, "").split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"--include {d}: no such folder")
    return dirs


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def _failed(plugin: str, e: BaseException) -> BaseException:
    """The one-line error for a plug-in that raised ``e`` while it imported or registered:
    any exception, ``BaseException`` subclasses of its own included (a
    ``GeneratorExit``, a class of its own that no ``except Exception`` catches). madara's
    own signals (the SIGINT/SIGTERM interrupt of the entry point) pass through as they are."""
    if not isinstance(e, (Exception, KeyboardInterrupt, SystemExit)) and type(e).__module__.split(".")[0] == "madara_cli":
        return e
    if isinstance(e, KeyboardInterrupt):
        return PluginInterrupted(f"{plugin}: interrupted while importing; nothing ran")
    if isinstance(e, SystemExit):
        return ConfigError(f"{plugin}: called sys.exit({e.code!r}) while importing (a plug-in registers, it must not exit); nothing ran")
    return ConfigError(f"{plugin}: {_one_line(e)}")


def import_file(path: Path) -> str:
    """Import the Python file ``path`` as a module of its own (once); its name."""
    key = str(path.resolve())
    if key in _loaded_files:
        return _loaded_files[key]
    name = f"madara_include_{hashlib.sha256(key.encode()).hexdigest()[:8]}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--include: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - a plugin's own error, of any kind, named in one line
        sys.modules.pop(name, None)
        raise _failed(f"--include {path}", e) from None
    _loaded_files[key] = name
    return name


def _register(obj: object) -> None:
    from madara_cli.backends.base import BackendSpec, register_backend
    from madara_cli.retrievers.spec import RetrieverSpec, register_retriever

    if isinstance(obj, BackendSpec):
        register_backend(obj)
    elif isinstance(obj, RetrieverSpec):
        register_retriever(obj)


def load_entry_points() -> None:
    for group in ENTRY_POINT_GROUPS:
        for ep in entry_points(group=group):
            if (group, ep.value) in _loaded_entry_points:
                continue
            try:
                _register(ep.load())
            except ConfigError:
                raise
            except BaseException as e:  # noqa: BLE001 - an installed plugin's error, of any kind, named in one line
                raise _failed(f"plugin {ep.name} (entry point {group}: {ep.value})", e) from None
            _loaded_entry_points.add((group, ep.value))


_LOADED: list[str | None] = [None]  # the --include folders loaded with, once loaded


def ensure_loaded() -> None:
    """:func:`load_plugins` once per process, again when ``--include`` folders were added since."""
    include = os.environ.get(INCLUDE_ENV, "")
    if _LOADED[0] != include:
        load_plugins()
        _LOADED[0] = include


def forget_loaded() -> None:
    """Have the next :func:`ensure_loaded` load the plugins afresh (entry points installed since)."""
    _LOADED[0] = None


def load_plugins() -> None:
    """Register every backend, retriever and strategy: shipped, installed, included."""
    from madara_cli.backends import load_builtin as load_backends
    from madara_cli.retrievers.spec import load_builtin as load_retrievers
    from madara_cli.strategies import load_all

    load_backends()
    load_retrievers()
    load_all()
    load_entry_points()
    for d in include_dirs():
        for f in sorted(d.glob("*.py")):
            import_file(f)
