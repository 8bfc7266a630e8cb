"""The settings schemas of pluggable config groups (``backend``, ``retriever``,
``strategy``), filled by the code that implements each option.

Config is the bottom layer: it cannot import the backends, retrievers or strategies
that own these schemas. So each of them registers its schema here when its module is
imported (:func:`register_schema`: a registry filled from above at import, never a
callback), and composition, which sits above the plug-ins, imports them first
(:func:`madara_cli.composition.plugins.ensure_loaded`). It then reads an option's
settings from here: a setting the chosen option lacks is one line naming the settings
it has, before any model or data loads.

A schema is a dataclass whose fields are the option's settings (``name`` first). Its
``runtime_only`` settings change speed or placement, never a number, and are left out
of cell and probe keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from madara_cli.errors import ConfigError

PLUGGABLE = ("backend", "retriever", "strategy")


@dataclass(frozen=True)
class SchemaEntry:
    group: str
    name: str
    schema: type
    runtime_only: tuple[str, ...] = ()
    # root config groups beyond the semantic ones whose settings change this option's
    # numbers (strategy=madara: the probe's rsc and the router's)
    key_groups: tuple[str, ...] = ()


_SCHEMAS: dict[str, dict[str, SchemaEntry]] = {g: {} for g in PLUGGABLE}


# Model settings only some backends read (vLLM: model.hf_source), by backend name: a key
# covers one only for the backends that declare it (config.identity.model_keyed).
_MODEL_SETTINGS: dict[str, tuple[str, ...]] = {}


def backend_model_settings() -> dict[str, tuple[str, ...]]:
    return dict(_MODEL_SETTINGS)


def register_schema(group: str, name: str, schema: type, runtime_only: tuple[str, ...] | list[str] = (),
                    model_settings: tuple[str, ...] = (), key_groups: tuple[str, ...] = ()) -> None:
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
    entry = SchemaEntry(group, name, schema, tuple(runtime_only), tuple(key_groups))
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


def entries(group: str) -> dict[str, SchemaEntry]:
    """Every option of ``group`` registered so far, by name."""
    return dict(_SCHEMAS.get(group, {}))


def registered(group: str) -> list[str]:
    return sorted(_SCHEMAS.get(group, {}))


def settings(group: str, name: str) -> list[str]:
    """The settings option ``name`` of ``group`` reads, in schema order (``name`` first)."""
    schema = schema_for(group, name)
    return [f.name for f in dataclasses.fields(schema)] if schema else ["name"]


def all_settings(group: str) -> set[str]:
    """Every setting any registered option of ``group`` has."""
    return {f.name for e in _SCHEMAS.get(group, {}).values() for f in dataclasses.fields(e.schema)}


def key_groups(group: str, name: str) -> tuple[str, ...]:
    """The root groups beyond the semantic ones that option ``name`` of ``group`` is keyed on."""
    entry = _SCHEMAS.get(group, {}).get(name)
    return entry.key_groups if entry else ()


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
        raise ConfigError(f"no {group} is registered (load the plugins first: madara_cli.composition.plugins.load_plugins())")
    raise ConfigError(f"{group} '{name}' has no implementation; registered {group} implementations: {', '.join(valid)}")
