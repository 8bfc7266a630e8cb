"""The one catalog of plug-ins: every backend, retriever, strategy and benchmark loader
:class:`~madara_cli.plugins.shape.Spec`, and every prompt family, by kind and name.

It lives in the bottom layer and knows no plug-in: each implementing module registers its
spec when imported (``SPEC = register(BackendSpec(...))``), and the one loader
(:func:`madara_cli.composition.plugins.load_plugins`: the shipped modules, entry points,
``--include`` folders) imports them before anything composes. Registering again from the
module that registered first (an import repeated) replaces the record; another module
under a taken name is an error naming both.
"""

from __future__ import annotations

import sys
from typing import TypeVar

from madara_cli.core.errors import ConfigError
from madara_cli.plugins.shape import PromptFamily, Spec

S = TypeVar("S", bound=Spec)

KINDS = ("backend", "retriever", "strategy", "loader")


class Catalog:
    def __init__(self) -> None:
        self._specs: dict[str, dict[str, Spec]] = {k: {} for k in KINDS}
        self._families: dict[str, PromptFamily] = {}
        self._owners: dict[tuple[str, str], str] = {}
        # (kind, name) -> where a plug-in that does not ship with madara came from (an
        # --include file's digest, a package's name and version): its cells are keyed on it
        self._sources: dict[tuple[str, str], str] = {}

    def _claim(self, kind: str, name: str, owner: str) -> None:
        old = self._owners.get((kind, name))
        if old is not None and old != owner:
            what = "prompt family" if kind == "prompts" else kind
            raise ValueError(f"{what} '{name}' is already registered (by {old})")
        self._owners[(kind, name)] = owner

    def register(self, spec: S, owner: str | None = None) -> S:
        """Register ``spec`` (and the prompt families it brings), or a prompt family; returns it."""
        owner = owner or sys._getframe(1).f_globals.get("__name__", "?")
        if isinstance(spec, PromptFamily):
            return self.register_family(spec, owner)  # type: ignore[return-value]
        kind = type(spec).kind
        if kind not in self._specs:
            raise ValueError(f"{type(spec).__name__} is no plug-in kind; kinds: {', '.join(KINDS)}")
        _check_schema(kind, spec)
        for family in spec.own_families():
            self.register_family(family, owner)
        self._claim(kind, spec.name, owner)
        self._specs[kind][spec.name] = spec
        return spec

    def register_family(self, family: PromptFamily, owner: str | None = None) -> PromptFamily:
        """Register a prompt family declared apart from any one spec (the shipped builders'
        families, which several strategies send)."""
        owner = owner or sys._getframe(1).f_globals.get("__name__", "?")
        self._claim("prompts", family.name, owner)
        for other in self._families.values():
            clash = set(other.templates) & set(family.templates)
            if other.name != family.name and clash:
                raise ValueError(f"prompt family '{family.name}' declares template {sorted(clash)[0]}, which family '{other.name}' has")
        self._families[family.name] = family
        return family

    def find(self, kind: str, name: str) -> Spec | None:
        return self._specs.get(kind, {}).get(name)

    def get(self, kind: str, name: str) -> Spec:
        """The one lookup: the spec registered as ``name``, or one ConfigError line naming
        the valid ones (the same line for every kind)."""
        spec = self.find(kind, name)
        if spec is None:
            valid = self.names(kind)
            if not valid:
                raise ConfigError(f"unknown {kind} '{name}': no {kind} is registered (the plug-ins load when a config composes)")
            raise ConfigError(f"unknown {kind} '{name}'; valid: {', '.join(valid)} (one of your own registers from an --include "
                              f"file or a 'madara.{kind}s' entry point)")
        return spec

    def names(self, kind: str) -> list[str]:
        return sorted(self._specs.get(kind, {}))

    def specs(self, kind: str) -> dict[str, Spec]:
        return dict(self._specs.get(kind, {}))

    def owner(self, kind: str, name: str) -> str | None:
        return self._owners.get((kind, name))

    def source(self, kind: str, name: str) -> str | None:
        """Where a plug-in that does not ship with madara came from; None for a shipped one."""
        return self._sources.get((kind, name))

    def note_source(self, kind: str, name: str, source: str) -> None:
        self._sources.setdefault((kind, name), source)

    def family(self, name: str) -> PromptFamily | None:
        return self._families.get(name)

    def families(self) -> dict[str, PromptFamily]:
        return dict(self._families)

    def template_family(self, template: str) -> PromptFamily | None:
        """The family that declares ``template``."""
        return next((f for f in self._families.values() if template in f.templates), None)


def _check_schema(kind: str, spec: Spec) -> None:
    """A spec's settings schema is a dataclass with a ``name`` field, and what it says of
    its settings (runtime-only, ranges) names settings it has."""
    import dataclasses

    if spec.schema is None:
        if spec.runtime_only or spec.ranges:
            raise TypeError(f"{kind} '{spec.name}': runtime_only or ranges without a schema")
        return
    schema = spec.schema
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise TypeError(f"{kind} '{spec.name}': its schema must be a dataclass, got {schema!r}")
    names = {f.name for f in dataclasses.fields(schema)}
    if "name" not in names:
        raise TypeError(f"{kind} '{spec.name}': its schema {schema.__name__} has no 'name' field")
    bad = [k for k in (*spec.runtime_only, *spec.ranges) if k not in names]
    if bad:
        raise TypeError(f"{kind} '{spec.name}': {bad} are not settings of {schema.__name__}")


CATALOG = Catalog()


def register(spec: S) -> S:
    """Register a plug-in's spec (or a prompt family) in the one catalog (see the module docstring)."""
    return CATALOG.register(spec, sys._getframe(1).f_globals.get("__name__", "?"))
