"""The settings schemas of the pluggable groups (``backend``, ``retriever``, ``strategy``),
read from the plug-ins' specs in the catalog: config sits below the plug-ins, which register
when imported (:func:`madara_cli.composition.plugins.ensure_loaded`)."""

from __future__ import annotations

import dataclasses

from madara_cli.plugins.catalog import CATALOG

PLUGGABLE = ("backend", "retriever", "strategy")


def schema_for(group: str, name: str) -> type | None:
    """The schema registered for option ``name`` of ``group``, or None."""
    spec = CATALOG.find(group, name)
    return spec.schema if spec is not None else None


def all_settings(group: str) -> set[str]:
    """Every setting any registered option of ``group`` has."""
    return {f.name for s in CATALOG.specs(group).values() if s.schema for f in dataclasses.fields(s.schema)}


def key_groups(group: str, name: str) -> tuple[str, ...]:
    """The root groups beyond the semantic ones that option ``name`` of ``group`` is keyed on."""
    return tuple(getattr(CATALOG.find(group, name), "key_groups", ()) or ())


def runtime_only(group: str, name: str) -> tuple[str, ...]:
    """The settings of option ``name`` of ``group`` that no cell or probe key covers."""
    spec = CATALOG.find(group, name)
    return spec.runtime_only if spec is not None else ()


def backend_model_settings() -> dict[str, tuple[str, ...]]:
    """Model settings only some backends read (vLLM: model.hf_source), by backend name: a
    key covers one only for the backends that declare it (config.keys.model_keyed)."""
    return {name: tuple(s.model_settings) for name, s in CATALOG.specs("backend").items() if getattr(s, "model_settings", ())}
