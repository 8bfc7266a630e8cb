"""The settings schemas of pluggable config groups (``backend``, ``retriever``,
``strategy``), filled by the code that implements each option.

Config is the bottom layer: it cannot import the backends, retrievers or strategies
that own these schemas. So each of them registers its schema here when its module is
imported (:func:`register_schema`), and the code that composes a config loads the
plugins first (:func:`madara_cli.experiment.plugins.load_plugins`; the CLI does it
before every verb). Composition then reads an option's settings from here: a setting
the chosen option lacks is one line naming the settings it has, before any model or
data loads.

A schema is a dataclass whose fields are the option's settings (``name`` first). Its
``runtime_only`` settings change speed or placement, never a number, and are left out
of cell and probe keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from madara_cli.errors import ConfigError

PLUGGABLE = ("backend", "retriever", "strategy")


@dataclass(frozen=True)
class SchemaEntry:
    group: str
    name: str
    schema: type
    runtime_only: tuple[str, ...] = ()


_SCHEMAS: dict[str, dict[str, SchemaEntry]] = {g: {} for g in PLUGGABLE}


# Model settings only some backends read (vLLM: model.hf_source), by backend name: a key
# covers one only for the backends that declare it (config.schema.model_keyed).
_MODEL_SETTINGS: dict[str, tuple[str, ...]] = {}


def backend_model_settings() -> dict[str, tuple[str, ...]]:
    return dict(_MODEL_SETTINGS)


def register_schema(group: str, name: str, schema: type, runtime_only: tuple[str, ...] | list[str] = (),
                    model_settings: tuple[str, ...] = ()) -> None:
    """Declare ``schema`` (a dataclass) as the settings of option ``name`` of ``group``.
    Registering the same schema twice (a module imported again) is harmless; another
    schema under a taken name is an error."""
    if group not in _SCHEMAS:
        raise ValueError(f"unknown pluggable group '{group}'; valid: {', '.join(PLUGGABLE)}")
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise TypeError(f"{group} '{name}': its schema must be a dataclass, got {schema!r}")
    fields = {f.name for f in dataclasses.fields(schema)}
    if "name" not in fields:
        raise TypeError(f"{group} '{name}': its schema {schema.__name__} has no 'name' field")
    bad = [k for k in runtime_only if k not in fields]
    if bad:
        raise TypeError(f"{group} '{name}': runtime-only {bad} are not settings of {schema.__name__}")
    entry = SchemaEntry(group, name, schema, tuple(runtime_only))
    old = _SCHEMAS[group].get(name)
    if old is not None and (old.schema.__module__, old.schema.__qualname__) != (schema.__module__, schema.__qualname__):
        raise ValueError(f"{group} '{name}' already has the schema {old.schema.__qualname__} ({old.schema.__module__})")
    _SCHEMAS[group][name] = entry
    if model_settings:
        _MODEL_SETTINGS[name] = tuple(model_settings)


def schema_for(group: str, name: str) -> type | None:
    """The schema registered for option ``name`` of ``group``, or None."""
    entry = _SCHEMAS.get(group, {}).get(name)
    return entry.schema if entry else None


# Plugins with a name but no settings of their own (benchmark loaders: ``benchmark.loader``)
# are checked by a function of the layer that holds them, set by the plugin loader; where
# none was set (library use without the loader), nothing is checked here.
_CHECKS: dict[str, Callable[[str], object]] = {}


def set_check(kind: str, check: Callable[[str], object]) -> None:
    _CHECKS[kind] = check


def check_name(kind: str, name: str) -> None:
    """Raise the kind's own one-line error when no ``kind`` plugin is called ``name``."""
    if kind in _CHECKS:
        _CHECKS[kind](name)


def registered(group: str) -> list[str]:
    return sorted(_SCHEMAS.get(group, {}))


def settings(group: str, name: str) -> list[str]:
    """The settings option ``name`` of ``group`` reads, in schema order (``name`` first)."""
    schema = schema_for(group, name)
    return [f.name for f in dataclasses.fields(schema)] if schema else ["name"]


def all_settings(group: str) -> set[str]:
    """Every setting any registered option of ``group`` has."""
    return {f.name for e in _SCHEMAS.get(group, {}).values() for f in dataclasses.fields(e.schema)}


def runtime_only(group: str, name: str) -> tuple[str, ...]:
    """The settings of option ``name`` of ``group`` that no cell or probe key covers."""
    entry = _SCHEMAS.get(group, {}).get(name)
    return entry.runtime_only if entry else ()


def require(group: str, name: str) -> type:
    """The schema of ``group`` option ``name``; a ConfigError naming the valid ones
    (and the cause when nothing of the group registered) otherwise."""
    schema = schema_for(group, name)
    if schema is not None:
        return schema
    valid = registered(group)
    if not valid:
        raise ConfigError(f"no {group} is registered (load the plugins first: madara_cli.experiment.plugins.load_plugins())")
    raise ConfigError(f"{group} '{name}' has no implementation; registered {group} implementations: {', '.join(valid)}")


# Before backends and retrievers had a schema each, every backend node carried the
# settings below at these values (the runtime-only ones aside) and every retriever
# node all of these, and cell, probe and snapshot keys were hashed so. A node is laid
# over them in every key, so those keys stay put; being constants they cannot tell
# two cells apart (a setting an option lacks fails at compose).
FLAT_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "backend": {"n_ctx": None, "served_model_name": None, "tokenizer": None},
    "retriever": {
        "k1": 0.9, "b": 0.4, "stemmer": "english", "stopwords": "en", "index": None, "encoder": None,
        "first_stage": "bm25s", "candidates": 50, "model": None,
    },
}


# A config.yaml written then holds a shipped backend's node with every backend's
# settings; the speed-only ones among them stay out of keys and summary columns.
_FLAT_RUNTIME_ONLY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "backend": (
        ("llamacpp", "vllm", "openai"),
        ("batch_size", "n_threads", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching",
         "base_url", "api_key_env", "max_in_flight", "retries", "timeout_s"),
    ),
}


def unkeyed(group: str, name: str) -> tuple[str, ...]:
    """The settings of ``group`` option ``name`` no key covers: its runtime-only ones (and,
    for a shipped backend, every speed-only setting a flat node of before could hold)."""
    names, flat = _FLAT_RUNTIME_ONLY.get(group, ((), ()))
    return runtime_only(group, name) + (flat if name in names else ())


def key_view(group: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of ``group`` as cell, probe and snapshot keys cover them: the
    option's runtime-only settings left out, the old flat defaults laid under."""
    skip = unkeyed(group, str(values.get("name")))
    return {**FLAT_KEY_DEFAULTS.get(group, {}), **{k: v for k, v in values.items() if k not in skip}}


# The code that composes installs the plugin loader (madara_cli.experiment.plugins.
# install_loader); compose() runs it once, so verbs that never compose never import the
# engines and strategies. Config itself imports nothing above it.
_LOADER: list[Callable[[], None]] = []
_LOADED: list[bool] = [False]


def set_loader(loader: Callable[[], None]) -> None:
    """Have :func:`ensure_loaded` call ``loader`` (once) before the first composition."""
    _LOADER[:] = [loader]
    _LOADED[0] = False


def ensure_loaded() -> None:
    """Run the installed plugin loader, once; nothing when none is installed."""
    if _LOADER and not _LOADED[0]:
        _LOADED[0] = True
        try:
            _LOADER[0]()
        except BaseException:
            _LOADED[0] = False
            raise
