"""The context every strategy receives, and its spec in the one catalog.

A strategy is ``fn(ctx, examples) -> list[Prediction]``: it receives every example of
the cell (``Example.docs`` already holds the retrieved top-k in rank order) and issues
each stage as ONE batched call through ``ctx.llm``, so the engine sees the whole stage at
once and the cache shares work between strategies.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, Callable, ClassVar, Optional, Protocol, Sequence, TypeVar

from madara_cli.backends.cache import CachedLLM
from madara_cli.config.folders import prompts_of
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import StrategyConfig
from madara_cli.config.settings import Node, Settings
from madara_cli.core.errors import ConfigError
from madara_cli.core.records import Doc, Example, Prediction
from madara_cli.plugins.catalog import CATALOG
from madara_cli.plugins.shape import Spec

S = TypeVar("S")


@dataclass
class StrategyContext:
    llm: CachedLLM
    cfg: Settings  # the whole composed config; strategies read their settings through settings_as
    report: dict[str, Any] = field(default_factory=dict)  # extra cell metrics (parse failures, ...)

    @property
    def strategy(self) -> Settings:
        return self.cfg.strategy

    def settings_as(self, schema: type[S]) -> S:
        """The strategy node as an instance of ``schema`` (its registered settings
        dataclass, or one it extends): ints, floats, lists and Enum choices typed, each
        checked against the schema once, instead of a cast at every read."""
        hints = _hints(schema)
        node = self.cfg.strategy
        return schema(**{f.name: _typed(hints[f.name], node[f.name]) for f in fields(schema) if f.name in node})  # type: ignore[arg-type]

    @property
    def temperature(self) -> float:
        return float(self.cfg.model.temperature)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    def reading(self, name: str, default: str) -> str:
        """Setting ``name`` of the ``reading`` group (``default`` where a config has none)."""
        return str((self.cfg.get("reading") or {}).get(name, default))

    @property
    def prompts(self) -> PromptSet:
        """The cell's prompt set (``cfg.prompts``), read and checked at compose time."""
        return prompts_of(self.cfg)


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def _typed(hint: Any, value: Any) -> Any:
    """A composed value (checked against its schema at composition) as its field's type: an
    Enum choice as its member, a tuple as the list the schema says; ``Optional`` read through."""
    if value is None:
        return None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if isinstance(value, tuple):
        return [_typed(next(iter(typing.get_args(hint)), Any), v) for v in value]
    return value


StrategyFn = Callable[[StrategyContext, Sequence[Example]], list[Prediction]]


class EngineSource(Protocol):
    """Where a prepare step takes an engine for a config (the run's engine pool). A source
    whose engines record requests instead of answering them (``madara plan``'s) has
    ``answers = False``: nothing it replies may be kept (experiment.examples.engines_answer)."""

    def get(self, cfg: Settings) -> CachedLLM: ...


# A prepare step: (the cell's config, its engines or None when nothing may load (plan),
# the calibration split as the cell loaded it or None, the reranker's config or None)
# -> the strategy function that runs the cell.
PrepareFn = Callable[[Node, Optional[EngineSource], Optional[list[Example]], Optional[Node]], StrategyFn]


@dataclass(frozen=True, kw_only=True)
class StrategySpec(Spec):
    """One strategy: what every plug-in declares (:class:`~madara_cli.plugins.shape.Spec`:
    name, a settings schema extending config.schema.StrategyConfig, the prompt families it
    sends beside the generator's, ranges, checks) plus exactly one of what runs a cell:
    ``run`` (``fn(ctx, examples) -> predictions``); a ``prepare`` step, run before the
    cell's engine is taken, that returns it; or ``routed`` (``madara``: the pipeline
    probes, routes and runs the strategy the route names, :mod:`madara_cli.experiment.treat`).
    ``key_groups``: root groups beyond the usual ones its key covers (``madara``: ``rsc``,
    ``router``)."""

    kind: ClassVar[str] = "strategy"

    schema: Optional[type] = StrategyConfig  # a strategy without settings of its own has the name alone
    run: Optional[StrategyFn] = None
    prepare: Optional[PrepareFn] = None
    routed: bool = False
    key_groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if sum((self.run is not None, self.prepare is not None, self.routed)) != 1:
            raise TypeError(f"strategy '{self.name}': exactly one of run, prepare and routed says what runs a cell")


def strategy_fn(name: str) -> StrategyFn:
    """What strategy ``name`` (its implementation name) runs; one that runs through its
    prepare step or the route of its probe is one ConfigError line saying so."""
    spec: StrategySpec = CATALOG.get("strategy", name)  # type: ignore[assignment]
    if spec.run is None:
        how = "its prepare step (StrategySpec.prepare)" if spec.prepare else "the route of its probe (StrategySpec.routed)"
        raise ConfigError(f"strategy '{name}' runs through {how}, not on its own")
    return spec.run


def generate_answers(ctx: StrategyContext, stage: str, examples: Sequence[Example], selections: Sequence[Sequence[Doc]]) -> list[Prediction]:
    """The final generation stage shared by every filtering strategy: one generator
    call per example over its selected documents, batched."""
    from madara_cli.agents.generator import clean_answer, generation_request

    gen, prompts = ctx.cfg.generation, ctx.prompts
    reqs = [generation_request(ex, docs, gen.max_tokens, ctx.temperature, ctx.seed, gen.get("style", "zeroshot"), prompts) for ex, docs in zip(examples, selections)]
    outs = ctx.llm.chat(stage, reqs)
    return [
        Prediction(example_id=ex.id, answer=clean_answer(c.text, ex.task, ctx.reading("answers", "tidy")), raw=c.text, doc_ids=tuple(d.id for d in docs))
        for ex, docs, c in zip(examples, selections, outs)
    ]


# --- helpers shared by the assessment strategies ---


def support_coverage(example: Example, doc_ids: Sequence[str]) -> dict[str, int]:
    """``supporting_in_topk``: how many of the example's gold supporting documents
    (``meta["supporting"]``, e.g. MuSiQue's annotated chain, Table 17) are among
    ``doc_ids``; ``n_supporting``: how many there are. Empty without that meta."""
    supporting = example.meta.get("supporting")
    if supporting is None:
        return {}
    chosen = set(doc_ids)
    return {"supporting_in_topk": sum(d in chosen for d in supporting), "n_supporting": len(supporting)}


def with_extra(pred: Prediction, **extra: Any) -> Prediction:
    """``pred`` with ``extra`` merged into its ``extra`` dict."""
    return replace(pred, extra={**pred.extra, **extra})


def rounded(values: Sequence[float], digits: int = 4) -> list[float | None]:
    """JSON-safe list: floats rounded, NaN/inf as None."""
    return [None if not math.isfinite(float(v)) else round(float(v), digits) for v in values]
