"""Strategy registry and the context every strategy receives.

A strategy is ``fn(ctx, examples) -> list[Prediction]``: it receives every example
of the cell (``Example.docs`` already holds the retrieved top-k in rank order) and
issues each stage as ONE batched call through ``ctx.llm``, so the engine sees the
whole stage at once and the cache shares work between strategies.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from omegaconf import DictConfig

from madara_cli.backends.cache import CachedLLM
from madara_cli.records import Doc, Example, Prediction
from madara_cli.registry import Registry


@dataclass
class StrategyContext:
    llm: CachedLLM
    cfg: DictConfig  # the whole composed config; strategies read cfg.strategy
    report: dict[str, Any] = field(default_factory=dict)  # extra cell metrics (parse failures, ...)

    @property
    def strategy(self) -> DictConfig:
        return self.cfg.strategy

    @property
    def temperature(self) -> float:
        return float(self.cfg.model.temperature)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)


StrategyFn = Callable[[StrategyContext, Sequence[Example]], list[Prediction]]
STRATEGIES: Registry[StrategyFn] = Registry("strategy")


def load_all() -> None:
    """Import every module of this package so that each registers its strategies."""
    import madara_cli.strategies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"madara_cli.strategies.{mod.name}")


def generate_answers(ctx: StrategyContext, stage: str, examples: Sequence[Example], selections: Sequence[Sequence[Doc]]) -> list[Prediction]:
    """The final generation stage shared by every filtering strategy: one generator
    call per example over its selected documents, batched."""
    from madara_cli.agents.generator import clean_answer, generation_request

    gen = ctx.cfg.generation
    reqs = [generation_request(ex, docs, gen.max_tokens, ctx.temperature, ctx.seed) for ex, docs in zip(examples, selections)]
    outs = ctx.llm.chat(stage, reqs)
    return [
        Prediction(example_id=ex.id, answer=clean_answer(c.text, ex.task), raw=c.text, doc_ids=tuple(d.id for d in docs))
        for ex, docs, c in zip(examples, selections, outs)
    ]
