"""The one loader of plug-ins into the one catalog, once per process (:func:`ensure_loaded`): shipped
(:data:`SHIPPED`), installed (entry points :data:`ENTRY_POINT_GROUPS`) and each ``*.py`` directly in
an ``--include DIR`` (kept in ``$MADARA_INCLUDE`` for launcher workers). A non-shipped plug-in's
source keys its cells; one failing to import is one line: an exception or ``sys.exit`` (exit 2),
an interrupt (exit 130). See docs/extending.md."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from madara_cli.core.errors import ConfigError, PluginInterrupted
from madara_cli.plugins.catalog import CATALOG, KINDS

ENTRY_POINT_GROUPS = ("madara.backends", "madara.retrievers", "madara.strategies", "madara.loaders")
INCLUDE_ENV = "MADARA_INCLUDE"

_loaded_files: dict[str, str] = {}  # resolved path -> module name
_loaded_entry_points: set[tuple[str, str]] = set()


def _registered() -> set[tuple[str, str]]:
    """Every (kind, name) in the catalog so far, prompt families included."""
    return {(k, n) for k in KINDS for n in CATALOG.names(k)} | {("prompts", n) for n in CATALOG.families()}


def _note_sources(before: set[tuple[str, str]], source: str) -> None:
    for kind, name in _registered() - before:
        CATALOG.note_source(kind, name, source)


def add_include(path: str | Path) -> Path:
    """``--include DIR``: checked, and kept in the environment so launcher workers import the same folders."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise ConfigError(f"--include {path}: no such folder")
    current = [p for p in os.environ.get(INCLUDE_ENV, "").split(os.pathsep) if p]
    if str(d) not in current:
        os.environ[INCLUDE_ENV] = os.pathsep.join([*current, str(d)])
    return d


def include_dirs() -> list[Path]:
    dirs = [Path(p).expanduser() for p in os.environ.get(INCLUDE_ENV, "").split(os.pathsep) if p.strip()]
    if missing := next((d for d in dirs if not d.is_dir()), None):
        raise ConfigError(f"--include {missing}: no such folder")
    return dirs


def _failed(plugin: str, e: BaseException) -> BaseException:
    """The one-line error for a plug-in that raised ``e`` while it imported or registered, a
    ``BaseException`` of its own included; madara's own interrupt (SIGINT/SIGTERM) passes through."""
    if not isinstance(e, (Exception, KeyboardInterrupt, SystemExit)) and type(e).__module__.split(".")[0] == "madara_cli":
        return e
    if isinstance(e, KeyboardInterrupt):
        return PluginInterrupted(f"{plugin}: interrupted while importing; nothing ran")
    if isinstance(e, SystemExit):
        return ConfigError(f"{plugin}: called sys.exit({e.code!r}) while importing (a plug-in registers, it must not exit); nothing ran")
    return ConfigError(f"{plugin}: " + " ".join(f"{type(e).__name__}: {e}".split())[:300])


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
    before = _registered()
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - a plugin's own error, of any kind, named in one line
        sys.modules.pop(name, None)
        raise _failed(f"--include {path}", e) from None
    from madara_cli.config.identity import file_digest

    _note_sources(before, f"include:{path.name}:sha256:{file_digest(path)[:16]}")
    _loaded_files[key] = name
    return name


def _register(obj: object, owner: str) -> None:
    """What an entry point names: a module (imported, it registered), a spec (defined, unregistered) or a callable that registers."""
    import inspect

    from madara_cli.plugins.shape import Spec

    if isinstance(obj, Spec):
        if CATALOG.find(type(obj).kind, obj.name) is not obj:
            CATALOG.register(obj, owner)
    elif callable(obj) and not inspect.ismodule(obj) and not isinstance(obj, type):
        obj()


def load_entry_points() -> None:
    for group in ENTRY_POINT_GROUPS:
        for ep in entry_points(group=group):
            if (group, ep.value) in _loaded_entry_points:
                continue
            before = _registered()
            try:
                _register(ep.load(), ep.value.split(":")[0])
            except ConfigError:
                raise
            except BaseException as e:  # noqa: BLE001 - an installed plugin's error, of any kind, named in one line
                raise _failed(f"plugin {ep.name} (entry point {group}: {ep.value})", e) from None
            dist = getattr(ep, "dist", None)
            _note_sources(before, f"package:{dist.name}=={dist.version}" if dist is not None else f"entry-point:{ep.value}")
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


# the shipped plug-ins, named as entry points name theirs ("module" or "module:object"): imported by name, so the loader sits below them
SHIPPED = (
    "madara_cli.agents.families",
    *(f"madara_cli.backends.{m}:SPEC" for m in ("llamacpp", "vllm_backend", "openai_backend", "hf")),
    *(f"madara_cli.retrievers.{m}:SPEC" for m in ("bm25s", "pyserini", "dense", "rerank")),
    *(f"madara_cli.strategies.{m}:SPEC" for m in ("nf", "main_rag", "cross_encoder", "routed", "self_consistency")),
    *(f"madara_cli.strategies.{m}:SPECS" for m in ("assessed", "pde")),
    *(f"madara_cli.data.loaders.{m}:SPEC" for m in (
        "mini_loader", "conflicts", "conflictqa", "fever", "triviaqa", "popqa", "musique_loader", "arc_challenge", "asqa", "own_data")),
)


def load_object(entry: str) -> object:
    """What a ``"module:object"`` entry names (the module itself without ``:object``)."""
    module, _, attr = entry.partition(":")
    obj: object = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def load_plugins() -> None:
    """Register every plug-in: shipped (each registers its specs when imported), installed (entry points), included (``--include``)."""
    for entry in SHIPPED:
        load_object(entry)
    load_entry_points()
    for d in include_dirs():
        for f in sorted(d.glob("*.py")):
            import_file(f)
