"""Strategy registry and the context every strategy receives.

A strategy is ``fn(ctx, examples) -> list[Prediction]``: it receives every example
of the cell (``Example.docs`` already holds the retrieved top-k in rank order) and
issues each stage as ONE batched call through ``ctx.llm``, so the engine sees the
whole stage at once and the cache shares work between strategies.

Each strategy registers one :class:`StrategySpec`, the same shape as a backend's and a
retriever's: its settings schema, the prompt families it sends (which decide its cells'
keys), the root groups beyond the usual ones its key covers, and an optional prepare
step, named, that runs before the cell's engine is taken and returns what runs
(``strategy=madara``: the probe and the route, :data:`PREPARE_STEPS`, filled by the
layer that can run a probe).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar

from omegaconf import DictConfig, OmegaConf

from madara_cli.backends.cache import CachedLLM
from madara_cli.config.folders import prompts_of
from madara_cli.config.plugin_schemas import register_schema, schema_for
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import StrategyConfig
from madara_cli.records import Doc, Example, Prediction
from madara_cli.registry import Registry

S = TypeVar("S")


@dataclass
class StrategyContext:
    llm: CachedLLM
    cfg: DictConfig  # the whole composed config; strategies read their settings through settings_as
    report: dict[str, Any] = field(default_factory=dict)  # extra cell metrics (parse failures, ...)

    @property
    def strategy(self) -> DictConfig:
        return self.cfg.strategy

    def settings_as(self, schema: type[S]) -> S:
        """The strategy node as an instance of ``schema`` (its registered settings
        dataclass, or one it extends): ints, floats, lists and Enum choices typed, each
        checked against the schema once, instead of a cast at every read."""
        names = {f.name for f in fields(schema)}  # type: ignore[arg-type]
        node = {k: v for k, v in self.cfg.strategy.items() if k in names}
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))  # type: ignore[return-value]

    @property
    def temperature(self) -> float:
        return float(self.cfg.model.temperature)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    def reading(self, name: str, default: str) -> str:
        """Setting ``name`` of the ``reading`` group (``default`` where a config has none)."""
        node = self.cfg.get("reading") or {}
        return str(node.get(name, default))

    @property
    def prompts(self) -> PromptSet:
        """The cell's prompt set (``cfg.prompts``), read and checked at compose time."""
        return prompts_of(self.cfg)


StrategyFn = Callable[[StrategyContext, Sequence[Example]], list[Prediction]]


class EngineSource(Protocol):
    """Where a prepare step takes an engine for a config (the run's engine pool)."""

    def get(self, cfg: DictConfig) -> CachedLLM: ...


# A prepare step: (the cell's config, its engines or None when nothing may load (plan),
# the calibration split as the cell loaded it or None, the reranker's config or None)
# -> the strategy function that runs the cell.
PrepareFn = Callable[[DictConfig, Optional[EngineSource], Optional[list[Example]], Optional[DictConfig]], StrategyFn]
PREPARE_STEPS: Registry[PrepareFn] = Registry("prepare step")


@dataclass(frozen=True)
class StrategySpec:
    """One strategy, as it registered."""

    name: str
    run: StrategyFn | None  # None: its prepare step returns what runs
    schema: type  # its settings (a StrategyConfig dataclass)
    prompts: tuple[str, ...] | None  # prompt families beside the generator's; None: the assessors' and detector's
    prepare: str | None = None  # a PREPARE_STEPS name, run before the cell's engine is taken
    key_groups: tuple[str, ...] = ()  # root groups beyond the usual ones its key covers (madara: rsc, router)


class StrategyRegistry(Registry[StrategyFn]):
    """Strategies by implementation name (a strategy yaml's ``impl``, else its ``name``).
    ``register(name, schema=Config)`` also declares the settings the strategy reads (a
    dataclass extending :class:`~madara_cli.config.schema.StrategyConfig`), so a plugin
    strategy is checked at compose like the shipped ones, whose schemas live in
    :mod:`madara_cli.config.schema`. Registering the same function again (its module
    imported twice) is a no-op."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self._specs: dict[str, StrategySpec] = {}

    def register(self, name: str, schema: type | None = None, prompts: tuple[str, ...] | None = None,
                 key_groups: tuple[str, ...] = ()) -> Callable[[StrategyFn], StrategyFn]:
        """``prompts``: the prompt families the strategy sends beside the generator's
        (``("judge",)``, ``()``), which its cells' keys then cover exactly; None keeps the
        default of a document-assessment strategy (assessors and detector)."""
        base = super().register(name)
        if prompts is not None:  # an unknown family is refused at once, decorated or not
            from madara_cli.agents.digest import declare_families

            declare_families(name, tuple(prompts))

        def deco(fn: StrategyFn) -> StrategyFn:
            old = self._items.get(name)
            if old is not None and (getattr(old, "__module__", None), getattr(old, "__qualname__", None)) == (fn.__module__, fn.__qualname__):
                self._items[name] = fn
                return fn
            self._declare(StrategySpec(name, fn, schema or StrategyConfig, None if prompts is None else tuple(prompts),
                                       key_groups=tuple(key_groups)), given_schema=schema is not None)
            return base(fn)

        return deco

    def register_prepared(self, name: str, schema: type, prompts: tuple[str, ...] | None, prepare: str,
                          key_groups: tuple[str, ...] = ()) -> StrategySpec:
        """Register a strategy whose prepare step (``prepare``, a :data:`PREPARE_STEPS`
        name) returns what runs; registering it again from the same module is a no-op."""
        spec = StrategySpec(name, None, schema, None if prompts is None else tuple(prompts), prepare, tuple(key_groups))
        old = self._specs.get(name)
        if old is not None:
            if old == spec:
                return old
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._declare(spec, given_schema=True)
        return spec

    def _declare(self, spec: StrategySpec, given_schema: bool) -> None:
        if spec.prompts is not None:
            from madara_cli.agents.digest import declare_families

            declare_families(spec.name, spec.prompts)
        if given_schema or schema_for("strategy", spec.name) is None:  # a plugin without settings: name only
            register_schema("strategy", spec.name, spec.schema, key_groups=spec.key_groups)
        self._specs[spec.name] = spec

    def spec(self, name: str) -> StrategySpec:
        """The spec strategy implementation ``name`` registered."""
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} '{name}'; valid: {', '.join(self.names())}") from None

    def get(self, name: str) -> StrategyFn:
        """What strategy ``name`` runs; one that runs only through its prepare step says so."""
        spec = self._specs.get(name)
        if spec is not None and spec.run is None:
            raise KeyError(f"{self.kind} '{name}' runs through its prepare step '{spec.prepare}' (StrategySpec.prepare), not on its own")
        return super().get(name)

    def names(self) -> list[str]:
        return sorted(set(self._items) | set(self._specs))

    def __contains__(self, name: str) -> bool:
        return name in self._items or name in self._specs


STRATEGIES: StrategyRegistry = StrategyRegistry("strategy")


def load_all() -> None:
    """Import every module of this package so that each registers its strategies."""
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's folder
        importlib.import_module(f"madara_cli.strategies.{mod.name}")


def generate_answers(ctx: StrategyContext, stage: str, examples: Sequence[Example], selections: Sequence[Sequence[Doc]]) -> list[Prediction]:
    """The final generation stage shared by every filtering strategy: one generator
    call per example over its selected documents, batched."""
    from madara_cli.agents.generator import clean_answer, generation_request

    gen = ctx.cfg.generation
    prompts = ctx.prompts
    reqs = [generation_request(ex, docs, gen.max_tokens, ctx.temperature, ctx.seed, gen.get("style", "zeroshot"), prompts) for ex, docs in zip(examples, selections)]
    outs = ctx.llm.chat(stage, reqs)
    return [
        Prediction(example_id=ex.id, answer=clean_answer(c.text, ex.task, ctx.reading("answers", "tidy")), raw=c.text, doc_ids=tuple(d.id for d in docs))
        for ex, docs, c in zip(examples, selections, outs)
    ]


# --------------------------------------------------------------------------- #
# Helpers shared by the assessment strategies
# --------------------------------------------------------------------------- #


def support_coverage(example: Example, doc_ids: Sequence[str]) -> dict[str, int]:
    """``supporting_in_topk``: how many of the example's gold supporting documents
    (``meta["supporting"]``, e.g. MuSiQue's annotated chain, Table 17) are among
    ``doc_ids``; ``n_supporting``: how many there are. Empty without that meta."""
    supporting = example.meta.get("supporting")
    if supporting is None:
        return {}
    chosen = set(doc_ids)
    return {"supporting_in_topk": sum(1 for d in supporting if d in chosen), "n_supporting": len(supporting)}


def with_extra(pred: Prediction, **extra: Any) -> Prediction:
    """``pred`` with ``extra`` merged into its ``extra`` dict."""
    from dataclasses import replace

    return replace(pred, extra={**pred.extra, **extra})


def rounded(values: Sequence[float], digits: int = 4) -> list[float | None]:
    """JSON-safe list: floats rounded, NaN/inf as None."""
    import math

    return [None if not math.isfinite(float(v)) else round(float(v), digits) for v in values]

