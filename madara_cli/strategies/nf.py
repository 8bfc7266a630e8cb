"""No-Filter (NF): every retrieved document goes to the generator — standard RAG,
the baseline of every table in the paper (Section 5.3, strategy 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from madara_cli.config.schema import StrategyConfig
from madara_cli.core.records import Example, Prediction
from madara_cli.plugins import register
from madara_cli.strategies.context import StrategyContext, StrategySpec, generate_answers


@dataclass
class NFConfig(StrategyConfig):
    """No-Filter: every retrieved document goes to the generator; no settings."""


def no_filter(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    return generate_answers(ctx, "generate", examples, [ex.docs or () for ex in examples])


SPEC = register(StrategySpec(name="nf", schema=NFConfig, run=no_filter, description="No-Filter: every retrieved document to the generator"))
