"""Composing a run's config: :func:`compose` lays the Hydra overrides over ``configs/config.yaml``
and the chosen options' schemas, checked and resolved, choices as plain strings.

It sits above the plug-ins it composes and loads them itself
(:func:`madara_cli.composition.plugins.ensure_loaded`), so nothing below holds a callback;
config folders, plug-in-free override checks and grids stay in :mod:`madara_cli.config`.
``config.yaml``'s defaults start with ``base_config`` (:class:`~madara_cli.config.schema.RootConfig`)
and each ``strategy/<name>.yaml``'s with ``<name>_schema``, so every option and Enum choice is
validated; :mod:`madara_cli.config.validate` checks overrides first and ranges after.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from madara_cli.composition.plugins import ensure_loaded
from madara_cli.config.folders import (
    _first_lines,
    _no_sweeps,
    _option_yaml,
    _require_schema,
    _schema_default,
    _split_prompts,
    chosen_loader,
    chosen_option,
    option_impl,
    primary_and_searchpath,
    prompt_set,
    validate_overrides,
)
from madara_cli.config.overrides import Override, parse_overrides
from madara_cli.config.plugin_schemas import PLUGGABLE
from madara_cli.config.schema import RootConfig, loader_schema, register_schemas
from madara_cli.config.settings import Node, Settings
from madara_cli.core.errors import ConfigError
from madara_cli.plugins.catalog import CATALOG


def _force_add_settings(overrides: list[Override], chosen: dict[str, str]) -> list[str]:
    """A group yaml without a ``<name>_schema`` default (shipped backends and retrievers, a user's
    strategy) composes as a free node, its schema laid over after; so an override of a schema
    setting the yaml leaves out goes as ``++group.X``, not failing as an unknown key."""
    free = []
    for group, option in chosen.items():
        node = _option_yaml(option, group)
        if node is not None and _schema_default(node, group) is None:
            free.append(group + ".")
    if not free:
        return [o.raw for o in overrides]
    out = []
    for o in overrides:
        h = o.hydra
        plain = not (h.package or h.is_add() or h.is_force_add() or h.is_delete())
        out.append("++" + o.raw if plain and h.key_or_group.startswith(tuple(free)) else o.raw)
    return out


def _typed_group(cfg: DictConfig, group: str, option: str, schema: type | None = None) -> str | None:
    """Lay the option's schema (or ``schema``) over a node composed without it; returns a strategy's ``impl`` (no schema setting)."""
    impl = None
    if group == "strategy" and "impl" in cfg.strategy:
        impl = cfg.strategy.impl
        with open_dict(cfg.strategy):
            del cfg.strategy["impl"]
    if OmegaConf.get_type(cfg[group]) is not dict:
        return impl
    schema = schema or _require_schema(group, option)
    settings = list(schema.__dataclass_fields__)
    extra = [k for k in cfg[group] if k not in settings]
    if extra and group == "benchmark":  # the option's label names the loader whose schema this is
        from madara_cli.config.validate import not_applicable

        raise ConfigError(not_applicable(f"benchmark.{extra[0]}", option, settings, group))
    if extra:
        label = cfg[group].get("name", option)
        raise ConfigError(f"{group} {option}: {group}.{extra[0]} does not apply to {group} {label}; its settings: {', '.join(settings)}")
    try:
        cfg[group] = OmegaConf.merge(_structured(schema), cfg[group])
    except OmegaConfBaseException as e:
        raise ConfigError(f"{group} {option}: {group}.{getattr(e, 'key', '?')}: {_first_lines(e)}") from None
    return impl


def _benchmark_schema(option: str, loader: str, strict: bool = False) -> tuple[str, type | None]:
    """Benchmark ``option``'s label and the schema of the loader its node names (None, or with ``strict`` the
    catalog's one line, for an unknown loader)."""
    schema = loader_schema(loader) or (CATALOG.get("loader", loader).schema if strict else None)
    return (option if loader == option else f"{option} (loader {loader})"), schema


@functools.cache
def _structured(schema: type) -> DictConfig:
    """``OmegaConf.structured(schema)`` once per schema (a merge copies its first config: never changed)."""
    return OmegaConf.structured(schema)


def _hydra_once(overrides: list[str]) -> DictConfig:
    """Hydra's composition of ``config.yaml`` with ``overrides`` (search path first) from the primary folder."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=primary_and_searchpath()[0], version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


# Hydra merges the defaults list, then lays each value override (``limit=5``, ``++backend.x=1``)
# over it in order. The first step is most of the cost (~0.1 s a cell), so it is made once per
# distinct (search path and files, schemas, group choices, Hydra settings) and each cell's value
# overrides go over a copy by Hydra's own ConfigLoaderImpl._apply_overrides_to_config: byte for
# byte a whole composition (tests/core/test_compose_fast.py).
_BASES: dict[tuple, DictConfig] = {}  # Hydra's first step, copied per cell
_REPOS: dict[tuple, object] = {}
_GROUPS: dict[tuple, bool] = {}  # (search state, key) -> whether Hydra reads the key as a config group
_STATE_FILES_MAX = 2000  # a search path holding more yaml files than this is composed whole every time (its state: ())
_RACY_S = 2.0  # a yaml file changed this recently may change again within its stamp's resolution


def _search_state(overrides_head: tuple[str, ...]) -> tuple | None:
    """What Hydra's first step reads besides the overrides: the search path, each yaml's stamp
    (device, inode, size, mtime, ctime ns) and the registered schemas; None when a file changed
    within :data:`_RACY_S`, ``()`` when too many to stamp (then composed whole)."""
    import os
    import time

    from madara_cli.config.folders import scratch_primaries, search_dirs
    from madara_cli.config.schema import registered_schemas

    primary = primary_and_searchpath()[0]
    stamps: list[tuple] = []
    now = time.time_ns()
    # a scratch primary copies a config.yaml stamped below and is always "just changed": stamping it would compose a grid whole
    own = [] if primary in scratch_primaries() else [Path(primary)]
    for root in dict.fromkeys([*own, *search_dirs()]):
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            if len(Path(folder).relative_to(root).parts) >= 3:
                dirs.clear()
            for name in sorted(files):
                if not name.endswith((".yaml", ".yml")):
                    continue
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    return None
                if now - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_S * 1e9:
                    return None
                stamps.append((folder, name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
                if len(stamps) > _STATE_FILES_MAX:
                    return ()
    return (primary, overrides_head, tuple(stamps), registered_schemas())


_HELD: dict[tuple, tuple | None] | None = None  # while held_state() is on: each search path's state, read once


@contextlib.contextmanager
def held_state() -> Iterator[None]:
    """Compose many cells (a grid) from the config files as they start: stamps read once, not per cell."""
    from madara_cli.config.folders import holding_files

    global _HELD
    outer, _HELD = _HELD, (_HELD if _HELD is not None else {})
    try:
        with holding_files():
            yield
    finally:
        _HELD = outer


def _state(head: tuple[str, ...]) -> tuple | None:
    if _HELD is None:
        return _search_state(head)
    if _HELD.get(head) is None:  # None (a file just changed) is read again, not held for the grid; () is held (a
        # 10,000-file folder was walked again for every cell)
        _HELD[head] = _search_state(head)
    return _HELD[head]


def _clone(node: Any, parent: Any = None) -> Any:
    """An OmegaConf node's deep copy as ``copy.deepcopy`` makes it (own metadata and flags, values
    shared as OmegaConf shares them, a fresh resolver cache) at a tenth of its cost (deepcopy's memo
    machinery was a third of a grid cell's); checked against deepcopy in
    tests/composition/test_compose_fast.py for the OmegaConf in constraints.txt."""
    from collections import defaultdict

    new = object.__new__(type(node))
    state = dict(node.__dict__)
    old = state["_metadata"]
    meta = object.__new__(type(old))  # copy.copy, without its reduce protocol (half a clone's cost)
    meta.__dict__.update(old.__dict__)
    meta.flags = dict(meta.flags) if meta.flags is not None else {}
    meta.resolver_cache = defaultdict(dict)
    state["_metadata"] = meta
    state["_parent"] = parent
    if "_flags_cache" in state:
        state["_flags_cache"] = None
    content = state.get("_content")
    if isinstance(content, dict):
        state["_content"] = {k: _clone(v, new) for k, v in content.items()}
    elif isinstance(content, list):
        state["_content"] = [_clone(v, new) for v in content]
    new.__dict__.update(state)
    return new


def _split_values(primary: str, overrides: list[str]) -> tuple[tuple, list, tuple[str, ...]] | None:
    """(search state, value overrides in order, the rest as given: search path, group choices and
    Hydra settings, which make the defaults list's result); None when files are unstamped."""
    parsed = [o.hydra for o in parse_overrides(overrides)]
    head = tuple(o.input_line for o in parsed if o is not None and o.key_or_group == "hydra.searchpath")
    state = _state(head) if all(o is not None for o in parsed) else None
    if not state:
        return None
    if state not in _REPOS:
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=primary, version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            _REPOS[state] = loader._parse_overrides_and_create_caching_repo("config", list(head))[1]  # type: ignore[attr-defined]
    repo = _REPOS[state]

    def laid_over(o) -> bool:  # a value override, as Hydra's defaults list sorts it (not Hydra's own settings)
        if o.is_sweep_override() or o.key_or_group == "hydra" or o.key_or_group.startswith(("hydra.", "hydra/")):
            return False
        if isinstance(o.value(), dict):
            return True
        if (state, o.key_or_group) not in _GROUPS:
            _GROUPS[(state, o.key_or_group)] = bool(repo.group_exists(o.key_or_group))  # type: ignore[attr-defined]
        return not _GROUPS[(state, o.key_or_group)]

    sorted_out = [laid_over(o) for o in parsed]
    values = [o for o, v in zip(parsed, sorted_out) if v]
    base = tuple(o.input_line for o, v in zip(parsed, sorted_out) if not v)
    return state, values, base


def _hydra_config(primary: str, overrides: list[str]) -> DictConfig:
    """Hydra's composition of ``config.yaml`` with ``overrides`` (``hydra.searchpath`` first): the
    defaults step once per distinct choices, value overrides over a copy."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    split = _split_values(primary, overrides)
    if split is None:
        return _hydra_once(overrides)
    state, values, base = split
    key = (state, base)
    if key not in _BASES:
        _BASES[key] = _hydra_once(list(base))
    # a clone, not a pickle round trip (tests/core/test_safety.py keeps pickle out of the package)
    cfg = _clone(_BASES[key])
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return cfg


def _interpolates(value: Any) -> bool:
    """Whether any string in a container holds ``${`` (then OmegaConf decides whether it interpolates)."""
    if isinstance(value, dict):
        return any(_interpolates(v) for v in value.values())
    if isinstance(value, list):
        return any(_interpolates(v) for v in value)
    return isinstance(value, str) and "${" in value


def _container(primary: str, given: list[str], chosen: dict[str, str], prompts: str | None,
               interpolations: list[tuple[tuple, str]] | None = None) -> dict:
    """The composed config as resolved plain data (no ``overrides``): Hydra's composition of
    ``given``, schemas laid over, the strategy's ``impl`` kept where unlike its name;
    ``interpolations`` receives each (path, text as written) of an interpolating value."""
    cfg = _hydra_config(primary, given)
    impl = None
    for group in PLUGGABLE:
        found = _typed_group(cfg, group, chosen[group])
        impl = found if group == "strategy" else impl
    impl = impl or option_impl(chosen["strategy"])  # a yaml naming <impl>_schema runs that implementation
    loader = str(cfg.benchmark.get("loader") or "")  # the loader the node names picks its schema (an unknown one: one line)
    _typed_group(cfg, "benchmark", *_benchmark_schema(chosen.get("benchmark", loader), loader, strict=True))
    if prompts is not None:
        cfg.prompts = prompts
    container = OmegaConf.to_container(cfg, enum_to_str=True)
    written: list[tuple[tuple, str]] = []
    if _interpolates(container):  # resolving walks every node: only when a value asks for it
        written = _interpolations(container)
        OmegaConf.resolve(cfg)
        container = OmegaConf.to_container(cfg, enum_to_str=True)
    if impl is not None and str(impl) != str(container["strategy"]["name"]):  # impl == name: elided, so shipped keys stay put
        container["strategy"]["impl"] = str(impl)
    if interpolations is not None:
        interpolations.extend(written)
    return container  # type: ignore[return-value]


# While a grid composes (held_state), a cell is its group choices' composition (the base) with
# the leaves each value override changed in the base alone (``seed=3``): what composing it whole
# gives, since an override sets its key and what interpolates it. Where two touch one leaf (a key
# given twice, two keys one value interpolates), an override adds or deletes, or a part fails
# alone, the cell is composed the ordinary way. Compared byte for byte in
# tests/composition/test_compose_fast.py.
_CELL_BASES: dict[tuple, dict | None] = {}
_CELL_CHANGES: dict[tuple, list | None] = {}


def _copy_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_plain(v) for v in value]
    return value


def _changes(new: Any, old: Any, path: tuple = ()) -> list[tuple[tuple, Any]] | None:
    """(path, value) of each value ``old`` lacks or holds otherwise (a list is one); None when ``new`` lacks a key of ``old``."""
    if not (isinstance(new, dict) and isinstance(old, dict)):
        return [] if type(new) is type(old) and new == old else [(path, new)]
    if any(k not in new for k in old):
        return None
    out: list[tuple[tuple, Any]] = []
    for k, v in new.items():
        if k not in old:
            out.append(((*path, k), v))
            continue
        found = _changes(v, old[k], (*path, k))
        if found is None:
            return None
        out.extend(found)
    return out


def _interpolations(value: Any, path: tuple = ()) -> list[tuple[tuple, str]]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _interpolations(v, (*path, k))]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in _interpolations(v, (*path, i))]
    return [(path, value)] if isinstance(value, str) and "${" in value else []


_PLAIN_REF = re.compile(r"\$\{([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)\}")


def _reads(container: dict, written: list[tuple[tuple, str]]) -> tuple | None:
    """Each (path, text, values referred to) of a base's interpolations; None where one is more than
    plain ``${key}`` (a resolver, relative or nested): an override's changes are then this base's alone."""
    out = []
    for path, text in written:
        if "${" in _PLAIN_REF.sub("", text):
            return None
        refs = []
        for key in _PLAIN_REF.findall(text):
            node: Any = container
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    return None
                node = node[part]
            refs.append(repr(node))
        out.append((path, text, tuple(refs)))
    return tuple(out)


def _quiet_container(primary: str, given: list[str], chosen: dict[str, str], prompts: str | None,
                     interpolations: list[tuple[tuple, str]] | None = None) -> dict | None:
    from hydra.errors import HydraException

    try:
        return _container(primary, given, chosen, prompts, interpolations)
    except (ConfigError, HydraException, OmegaConfBaseException):
        return None  # the cell composed whole says what is wrong


def _set_by(o: Any, one: dict, start: dict) -> list[tuple[tuple, Any]] | None:
    """What value override ``o`` set over ``start`` alone (``one``): the values that differ, and its
    own key's even if equal (another base sharing these changes may differ there)."""
    changes = _changes(one, start)
    if changes is None:
        return None
    key = tuple(o.key_or_group.split("."))
    node: Any = one
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return None  # a key Hydra placed elsewhere: composed the ordinary way
        node = node[part]
    if not any(key[:len(path)] == path for path, _ in changes):
        changes.append((key, node))
    return changes


# A many-valued axis (seed=range(0,2500)) would compose a part per value: where one value set
# exactly its key to exactly itself (type kept) and nothing interpolates the key, another value of
# that type does likewise (types are checked before by check_override_types, ranges after).
_LIKE: dict[tuple, bool] = {}
_SCALARS = (int, float, bool, str)


def _like(o: Any, ckey: tuple, reads: tuple | None) -> tuple | None:
    """The key under which ``o``'s changes stand for its key's other values of its type, or None."""
    value = o.value()
    if reads is None or type(value) not in _SCALARS or o.is_force_add():
        return None
    key = o.key_or_group
    for _, text, _ in reads:
        if any(ref == key or ref.startswith(key + ".") or key.startswith(ref + ".") for ref in _PLAIN_REF.findall(text)):
            return None
    return (ckey[0], *ckey[2:], key, type(value))


def _cell_container(primary: str, given: list[str], chosen: dict[str, str], prompts: str | None) -> dict | None:
    """A grid cell's container from its remembered parts; None where composed the ordinary way."""
    split = _split_values(primary, given)
    if split is None:
        return None
    state, values, base = split
    if any(o.is_add() or o.is_delete() or o.package or isinstance(o.value(), dict) or "${" in o.input_line for o in values):
        return None
    bkey = (state, base, prompts, tuple(sorted(chosen.items())))
    if bkey not in _CELL_BASES:
        written: list[tuple[tuple, str]] = []
        made = _quiet_container(primary, list(base), chosen, prompts, written)
        _CELL_BASES[bkey] = None if made is None else (made, _reads(made, written))
    if _CELL_BASES[bkey] is None:
        return None
    start, reads = _CELL_BASES[bkey]
    out = _copy_plain(start)
    touched: set[tuple] = set()
    above: set[tuple] = set()  # every proper prefix of a touched path
    for o in values:
        head = o.key_or_group.split(".")[0]
        # an override's changes depend on its key's type (root or chosen option schema) and what
        # interpolates it: bases alike in both share them (seed=3 once, not per strategy)
        ckey = (state, o.input_line, head, chosen.get(head), prompts, reads) if reads is not None else (bkey, o.input_line)
        if ckey not in _CELL_CHANGES:
            like = _like(o, ckey, reads)
            if like is not None and _LIKE.get(like):
                _CELL_CHANGES[ckey] = [(tuple(o.key_or_group.split(".")), o.value())]
            else:
                one = _quiet_container(primary, [*base, o.input_line], chosen, prompts)
                _CELL_CHANGES[ckey] = None if one is None else _set_by(o, one, start)
                if like is not None:
                    _LIKE[like] = _CELL_CHANGES[ckey] == [(tuple(o.key_or_group.split(".")), o.value())] and \
                        type(_CELL_CHANGES[ckey][0][1]) is type(o.value())  # type: ignore[index]
        changes = _CELL_CHANGES[ckey]
        if changes is None:
            return None
        for path, value in changes:
            if path in touched or path in above or any(path[:i] in touched for i in range(1, len(path))):
                return None
            touched.add(path)
            above.update(path[:i] for i in range(1, len(path)))
            node = out
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = _copy_plain(value)
    return out


def compose(overrides: list[str] | None = None) -> Settings:
    """Compose ``configs/config.yaml`` with Hydra overrides, validated and resolved, choices as plain strings."""
    from hydra.errors import HydraException

    from madara_cli.config.validate import check_override_types, validate_config

    overrides = list(overrides or [])
    parsed = parse_overrides(overrides)  # once: every check below reads these records
    ensure_loaded()  # shipped, installed and --include plugins register their schemas, once
    validate_overrides(parsed)
    chosen = {g: chosen_option(g, parsed) for g in PLUGGABLE}
    schemas = {g: (o, _require_schema(g, o)) for g, o in chosen.items()}  # an unknown implementation: one line, now
    chosen["benchmark"] = chosen_option("benchmark", parsed)  # its schema is its loader's (compose lays it by the node's loader)
    schemas["benchmark"] = _benchmark_schema(chosen["benchmark"], chosen_loader(chosen["benchmark"], parsed))
    check_override_types(parsed, RootConfig, ConfigError, groups=schemas)
    _no_sweeps(parsed)
    register_schemas()
    hydra_overrides, prompts = _split_prompts(parsed)
    try:
        primary, extra = primary_and_searchpath()
        given = [*extra, *_force_add_settings(hydra_overrides, chosen)]
        container = _cell_container(primary, given, chosen, prompts) if _HELD is not None else None
        if container is None:
            container = _container(primary, given, chosen, prompts)
        container["overrides"] = list(overrides)  # as given: never resolved
        cfg = Settings(container)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad config: {_first_lines(e)} (keys: {', '.join(RootConfig.__dataclass_fields__)})") from None
    validate_config(cfg, ConfigError, plain=container)  # ranges and each chosen plug-in's checks, before any data or model loads
    prompt_set(str(cfg.prompts))  # every template read and checked, before any model loads
    return cfg


def strategy_node(option: str) -> Node:
    """Strategy option ``option``'s settings as composed (schema defaults and yaml), choices as plain strings."""
    return compose([f"strategy={option}"]).strategy
