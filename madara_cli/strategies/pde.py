"""Per-Document Extraction (PDE) and its component ablation (the MADARA paper, Section 4.4,
Table 1, Algorithm 2's PDE mode).

1. choose k documents -- ``selection: assessed``: the top-k by the weighted three-agent
   aggregate; ``selection: random``: k drawn uniformly, seeded by ``cfg.seed`` and the
   example id, with no assessment call;
2. answer from each alone with the factoid (or FEVER) generator (stage ``pde-extract``);
3. vote over answers grouped by :func:`metrics.normalize` -- ``vote: score`` sums each
   group's aggregate scores, ``vote: uniform`` counts members (ties:
   :func:`selection.pde_vote`; random selections rank in retrieval order).

Table 1's strategies: ``pde`` (assessed, score; 3 m scoring + k extraction calls),
``pde_uniform`` (assessed, uniform; the same calls), ``pde_random`` (random, uniform; k
extraction calls). An extraction request does not depend on how its document was
chosen, so the variants (and MAIN-RAG's Predictor) share answers through the cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from madara_cli.agents.generator import clean_answer, generation_request
from madara_cli.agents.matrix import ragged
from madara_cli.config import Selection, Vote
from madara_cli.core.records import Example, Prediction
from madara_cli.plugins import register
from madara_cli.strategies.assessed import ASSESSED_CHECKS, ASSESSED_PROMPTS, ASSESSED_RANGES, AssessedConfig, scored, selection_report
from madara_cli.strategies.context import StrategyContext, StrategySpec, rounded, support_coverage
from madara_cli.strategies.selection import pde_vote, pde_vote_authors, top_k, weighted_aggregate


@dataclass
class PDEConfig(AssessedConfig):
    """pde, pde_uniform, pde_random: scores are read only when selection or vote needs them."""

    selection: Selection = Selection.assessed  # assessed (top-k by score) | random (no assessment)
    vote: Vote = Vote.score  # score (sum of aggregate scores) | uniform (count)


EXTRACT_STAGE = "pde-extract"


def per_document_extraction(
    ctx: StrategyContext, examples: Sequence[Example], picks: Sequence[Sequence[int]], stage: str = EXTRACT_STAGE
) -> list[list[tuple[str, str]]]:
    """One generator call per (example, picked document) with that document alone, in ONE
    stage call: per example, (clean answer, raw text) in pick order."""
    gen, prompts = ctx.cfg.generation, ctx.prompts
    reqs = [
        generation_request(ex, [(ex.docs or ())[i]], int(gen.max_tokens), ctx.temperature, ctx.seed, gen.get("style", "zeroshot"), prompts)
        for ex, idx in zip(examples, picks)
        for i in idx
    ]
    outs = ctx.llm.chat(stage, reqs) if reqs else []
    rows = ragged(outs, map(len, picks))
    return [[(clean_answer(c.text, ex.task, ctx.reading("answers", "tidy")), c.text) for c in row] for ex, row in zip(examples, rows)]


def random_documents(example: Example, k: int, seed: int) -> list[int]:
    """``k`` distinct document indices drawn uniformly, seeded by ``seed`` and the
    example id (stable across runs and machines), returned in retrieval order."""
    m = len(example.docs or ())
    digest = hashlib.sha256(f"{seed}:{example.id}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return sorted(int(i) for i in rng.choice(m, size=min(k, m), replace=False)) if m else []


def per_document(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    st = ctx.settings_as(PDEConfig)
    selection, vote = str(st.selection), str(st.vote)  # the schema's Enums: nothing else gets here
    k, weights = st.top_k, st.weights
    needs_scores = selection == "assessed" or vote == "score"
    aggregates = [weighted_aggregate(m.scores, weights) for m in scored(ctx, examples)] if needs_scores else [None] * len(examples)
    picks = [top_k(a, k) for a in aggregates] if selection == "assessed" else [random_documents(ex, k, ctx.seed) for ex in examples]
    answers = per_document_extraction(ctx, examples, picks)

    preds, n_groups = [], []
    for ex, idx, agg, ans in zip(examples, picks, aggregates, answers):
        vote_weights = [float(agg[i]) for i in idx] if vote == "score" else None
        result = (pde_vote_authors if ctx.reading("pde_grouping", "madara") == "authors" else pde_vote)([a for a, _ in ans], vote_weights)
        n_groups.append(len(result.totals))
        doc_ids = tuple((ex.docs or ())[i].id for i in idx)
        won = result.winner is not None
        preds.append(Prediction(example_id=ex.id, answer=result.answer, raw=ans[result.winner][1] if won and ans else "", doc_ids=doc_ids, extra={
            "answers": [a for a, _ in ans], "vote_weights": rounded(vote_weights) if vote_weights is not None else None,
            "votes": {k_: round(v, 4) for k_, v in result.totals.items()}, "winner_doc": doc_ids[result.winner] if won and doc_ids else None,
            "aggregate": rounded(agg) if agg is not None else None, **support_coverage(ex, doc_ids),
        }))
    ctx.report["selection"] = selection_report(picks)
    ctx.report["pde"] = {"selection": selection, "vote": vote, "mean_answer_groups": round(float(np.mean(n_groups)), 4) if n_groups else 0.0}
    return preds


SPECS = [
    register(StrategySpec(name=name, schema=PDEConfig, run=per_document, ranges=ASSESSED_RANGES, checks=ASSESSED_CHECKS,
                          prompts=ASSESSED_PROMPTS, description=text))
    for name, text in (
        ("pde", "PDE: each kept document answered alone, answers voted by score"),
        ("pde_uniform", "PDE ablation: assessed documents, uniform vote"),
        ("pde_random", "PDE ablation: k random documents, uniform vote (asks no agent)"),
    )
]
