"""Self-consistency from the full context (the MADARA paper, Appendix M).

``n_samples`` generations over ALL retrieved documents (the No-Filter prompt) with
seeds ``cfg.seed + i``, then a majority vote over normalised answers (ties go to
the larger group, then to the earliest sample; empty answers do not vote). The
paper reports that this hurts on CONFLICTS (-8.6 to -12.7 pp): sampling more from a
confused multi-document context does not remove the confusion that isolation does.
Sample 0 is byte-identical to the NF request, so it comes from the cache after NF.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from madara_cli.agents.generator import clean_answer, generation_request
from madara_cli.config.schema import StrategyConfig
from madara_cli.core.records import Example, Prediction
from madara_cli.plugins import int_range, register
from madara_cli.strategies.context import StrategyContext, StrategySpec
from madara_cli.strategies.selection import pde_vote


@dataclass
class SelfConsistencyConfig(StrategyConfig):
    n_samples: int = 5

STAGE = "self-consistency"


def self_consistency(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    n = ctx.settings_as(SelfConsistencyConfig).n_samples
    if n < 1:
        raise ValueError(f"strategy.n_samples must be >= 1, got {n}")
    gen, prompts = ctx.cfg.generation, ctx.prompts
    reqs = [
        generation_request(ex, ex.docs or (), int(gen.max_tokens), ctx.temperature, ctx.seed + i, gen.get("style", "zeroshot"), prompts)
        for ex in examples
        for i in range(n)
    ]
    outs = ctx.llm.chat(STAGE, reqs) if reqs else []
    preds = []
    for e, ex in enumerate(examples):
        samples = outs[e * n : (e + 1) * n]
        answers = [clean_answer(c.text, ex.task, ctx.reading("answers", "tidy")) for c in samples]
        vote = pde_vote(answers)
        preds.append(Prediction(example_id=ex.id, answer=vote.answer, raw=samples[vote.winner].text if vote.winner is not None else "",
                                doc_ids=tuple(d.id for d in ex.docs or ()), extra={"samples": answers, "votes": {k: int(v) for k, v in vote.totals.items()}}))
    return preds


SPEC = register(StrategySpec(name="self_consistency", schema=SelfConsistencyConfig, run=self_consistency,
                             ranges={"n_samples": int_range(1)}, description="Self-consistency: sampled answers over all documents, majority vote"))
