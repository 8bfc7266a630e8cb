"""The one shape of a plug-in: a :class:`Spec` record that carries everything about its
option, declared in the module that implements it and registered with
:func:`madara_cli.plugins.catalog.register`.

Every kind (backend, retriever, strategy, benchmark loader) is a subclass that adds what
only that kind has (how to build an engine, how to rank, what runs a cell, how to load
rows); what every kind has is here:

* ``name``: the option's name (``backend=NAME``, ``strategy=NAME``, ``loader: NAME``);
* ``schema``: the dataclass of its settings (``name`` first), laid over its config node at
  compose, so a setting it does not read is one line;
* ``runtime_only``: settings that change speed or placement only, left out of every key;
* ``ranges``: ``{setting: Range}`` checked on the composed config (one line naming the
  setting, what it got and what it accepts), and ``checks``: functions of the composed
  config that raise one ``ConfigError`` line (settings that conflict);
* ``prompts``: the prompt families it sends (:class:`PromptFamily` records it brings,
  or the names of families another spec declares); they key its cells;
* ``package`` / ``extra``: the distribution whose version provenance records, and the
  pip extra that installs what it needs (``madara ls`` says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Range:
    """What a numeric setting accepts: ``ok(value)`` and the words for it."""

    ok: Callable[[Any], bool]
    description: str


def int_range(lo: int | None = None, hi: int | None = None, optional: bool = False) -> Range:
    def ok(v: Any) -> bool:
        if v is None:
            return optional
        return isinstance(v, int) and not isinstance(v, bool) and (lo is None or v >= lo) and (hi is None or v <= hi)

    rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    return Range(ok, f"an integer {rng}" + (" or null" if optional else ""))


def num_range(lo: float | None = None, hi: float | None = None, optional: bool = False, lo_open: bool = False,
              hi_open: bool = False) -> Range:
    def ok(v: Any) -> bool:
        if v is None:
            return optional
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        if lo is not None and (v <= lo if lo_open else v < lo):
            return False
        return hi is None or (v < hi if hi_open else v <= hi)

    if lo is None and hi is None:
        rng = "a finite number"
    elif hi is None:
        rng = f"a number {'>' if lo_open else '>='} {lo:g}"
    else:
        rng = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    return Range(ok, rng + (" or null" if optional else ""))


@dataclass(frozen=True)
class PromptFamily:
    """Prompts one builder sends, as templates of a prompt set.

    ``templates``: template name -> the fields it may use (``{{question}}``). ``defaults``:
    the text of each template where no prompt set has it (a plug-in's own wording; the
    shipped families' texts are ``configs/prompts/madara/``). ``sample``: renders the
    family's requests for the fixed sample in a given prompt set; its digest keys every
    cell that sends the family (:func:`madara_cli.config.identity.family_digest`), so an
    edit of a template or of the builder's glue moves it. Without one, the digest is
    taken over the templates' texts."""

    name: str
    templates: Mapping[str, tuple[str, ...]]
    defaults: Mapping[str, str] = field(default_factory=dict)
    sample: Optional[Callable[[Any], Sequence[Any]]] = None


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What every plug-in declares (see the module docstring)."""

    kind: ClassVar[str] = ""
    node: ClassVar[str] = ""  # the config node its settings are on where it is not ``kind``'s (a loader's: ``benchmark``)

    name: str
    schema: Optional[type] = None
    runtime_only: tuple[str, ...] = ()
    ranges: Mapping[str, Range] = field(default_factory=dict)
    checks: tuple[Callable[[Any], None], ...] = ()
    prompts: tuple["PromptFamily | str", ...] = ()
    package: Optional[str] = None
    extra: Optional[str] = None
    description: str = ""  # one line for `madara ls`
    # What else of a composed config keys what it makes, beyond its own settings (the mini
    # loader: its generator's size; the reranker: its model and prompt). None: nothing.
    key: Optional[Callable[[Any], Any]] = None

    def families(self) -> tuple[str, ...]:
        """The names of the prompt families it sends."""
        return tuple(f.name if isinstance(f, PromptFamily) else str(f) for f in self.prompts)

    def own_families(self) -> tuple[PromptFamily, ...]:
        """The prompt families it brings (declares itself)."""
        return tuple(f for f in self.prompts if isinstance(f, PromptFamily))
