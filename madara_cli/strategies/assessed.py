"""Scoring treatments (the MADARA paper, Section 5.3 and Appendices B-C): the three agents
assess every document, a ranking reranks or filters, one generation answers over the
selection. ``three_agent`` and ``cot`` rank by the weighted aggregate (0.4/0.3/0.3) over
base or CoT scores, ``sda``/``sda_cot`` by Score Distribution Alignment (Algorithm 1),
``rrf`` by Reciprocal Rank Fusion (k = 60), all keeping the top-k; ``atf`` filters at
mu - kappa*sigma (Section 4.3). ``configs/strategy/<name>.yaml`` holds the paper's
settings. All issue the same scoring requests (:mod:`madara_cli.agents.requests`), so
after the first only their final generation is new -- not even that when their
selections coincide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from madara_cli.agents.matrix import ScoreMatrix
from madara_cli.agents.polarization import assessment_report
from madara_cli.agents.scoring import AssessSettings, assess
from madara_cli.config.schema import ConflictCalls, RankTies, Scoring, StrategyConfig
from madara_cli.core.records import Example, Prediction
from madara_cli.plugins import int_range, num_range, register
from madara_cli.strategies.context import StrategyContext, StrategySpec, generate_answers, rounded, support_coverage, with_extra
from madara_cli.strategies.selection import atf_select, atf_threshold, rrf_fuse, sda_rank, top_k, weighted_aggregate


@dataclass
class AssessedConfig(StrategyConfig):
    """The three agents score every document (strategies/assessed.py: three_agent,
    cot, sda, sda_cot); the ranking keeps the top_k."""

    top_k: int = 5  # documents kept after assessment (paper: top-5 of 10)
    weights: list[float] = field(default_factory=lambda: [0.4, 0.3, 0.3])  # relevance, consistency, conflict
    scoring: Scoring = Scoring.generate  # generate (JSON text) | logprob (expected digit)
    cot: bool = False
    conflict: ConflictCalls = ConflictCalls.per_query  # per_query (Appendix N: one call) | per_document


@dataclass
class SDAConfig(AssessedConfig):
    """sda, sda_cot: the assessed settings plus how tied scores are ranked."""

    rank_ties: RankTies = RankTies.ordinal  # ordinal (the authors') | average


@dataclass
class ATFConfig(AssessedConfig):
    kappa: float = 0.5  # threshold mu - kappa*sigma
    min_keep: int = 2


@dataclass
class RRFConfig(AssessedConfig):
    rrf_k: int = 60


N_AGENTS = 3  # relevance, consistency, conflict (strategy.weights)


def check_weights(cfg) -> None:
    """strategy.weights: one non-negative number per agent, not all zero."""
    from madara_cli.core.errors import ConfigError

    w = list(cfg.strategy.weights)
    if len(w) != N_AGENTS:
        raise ConfigError(f"strategy.weights has {len(w)} value(s); expected {N_AGENTS} (relevance, consistency, conflict), e.g. strategy.weights=[0.4,0.3,0.3]")
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in w) or not any(w):
        raise ConfigError(f"strategy.weights={w}: expected {N_AGENTS} non-negative numbers, not all zero")


# What every assessing strategy checks (settings that undo each other are
# config/validate.py's CONFLICTS) and the prompt families it sends.
ASSESSED_RANGES = {"top_k": int_range(1)}
ASSESSED_CHECKS = (check_weights,)
ASSESSED_PROMPTS = ("assessors", "detector")


def assess_cell(
    ctx: StrategyContext, examples: Sequence[Example], cot: bool | None = None, mode: str | None = None, conflict: str | None = None
) -> list[ScoreMatrix]:
    """:func:`~madara_cli.agents.scoring.assess` with the cell's engine, prompt set and
    settings (``cot``, ``mode`` and ``conflict`` default to the strategy's)."""
    settings = AssessSettings.from_config(
        ctx.strategy, ctx.cfg.generation, ctx.cfg.get("reading"), temperature=ctx.temperature, seed=ctx.seed, cot=cot, mode=mode, conflict=conflict
    )
    return assess(ctx.llm, examples, settings, ctx.prompts)


def scored(ctx: StrategyContext, examples: Sequence[Example]) -> list[ScoreMatrix]:
    """The three agents over the cell (one batched call), the assessment statistics
    recorded in ``ctx.report["assessment"]``."""
    st = ctx.settings_as(AssessedConfig)
    cot, mode = st.cot, str(st.scoring)
    mats = assess_cell(ctx, examples, cot=cot, mode=mode)
    ctx.report["assessment"] = assessment_report(mats, cot=cot, mode=mode)
    return mats


def selection_report(selections: Sequence[Sequence[int]]) -> dict:
    sizes = [len(s) for s in selections]
    return {"mean_selected": round(float(np.mean(sizes)), 4) if sizes else 0.0, "min_selected": min(sizes, default=0), "max_selected": max(sizes, default=0)}


# A ranking: score matrix -> one value per document (higher = better).
Ranking = Callable[[np.ndarray], np.ndarray]


def _select_and_generate(
    ctx: StrategyContext, examples: Sequence[Example], ranking: Ranking, select: Callable[[np.ndarray], list[int]],
    describe: Callable[[np.ndarray], dict] | None = None,
) -> list[Prediction]:
    mats = scored(ctx, examples)
    values = [ranking(m.scores) for m in mats]
    picks = [select(v) for v in values]
    selections = [[(ex.docs or ())[i] for i in idx] for ex, idx in zip(examples, picks)]
    preds = generate_answers(ctx, "generate", examples, selections)
    ctx.report["selection"] = selection_report(picks)
    return [
        with_extra(pred, scores=m.to_json(), score_failures=int(m.failed.sum()), ranking=rounded(v), selected=idx,
                   **support_coverage(ex, pred.doc_ids), **(describe(v) if describe else {}))
        for ex, pred, m, v, idx in zip(examples, preds, mats, values, picks)
    ]


def weighted_rerank(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    """3-Agent baseline / CoT de-polarization: rerank by the weighted aggregate, top-k."""
    st = ctx.settings_as(AssessedConfig)
    return _select_and_generate(ctx, examples, lambda s: weighted_aggregate(s, st.weights), lambda v: top_k(v, st.top_k))


def score_distribution_alignment(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    """SDA (Algorithm 1): rerank by the weighted mean of per-agent percentile ranks, top-k."""
    st = ctx.settings_as(SDAConfig)
    return _select_and_generate(ctx, examples, lambda s: sda_rank(s, st.weights, ties=str(st.rank_ties)), lambda v: top_k(v, st.top_k))


def reciprocal_rank_fusion(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    """RRF over the three agents' rankings (Appendix C), top-k."""
    st = ctx.settings_as(RRFConfig)
    return _select_and_generate(ctx, examples, lambda s: rrf_fuse(s, k=st.rrf_k, weights=st.weights), lambda v: top_k(v, st.top_k))


def adaptive_threshold_filtering(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    """ATF (Section 4.3): filter the weighted aggregate at mu - kappa*sigma."""
    st = ctx.settings_as(ATFConfig)
    kappa, lo, hi = st.kappa, st.min_keep, st.top_k
    return _select_and_generate(
        ctx, examples, lambda s: weighted_aggregate(s, st.weights), lambda v: atf_select(v, kappa=kappa, min_keep=lo, max_keep=hi),
        lambda v: {"threshold": rounded([atf_threshold(v, kappa)])[0], "mu": rounded([float(np.mean(v))])[0] if len(v) else None, "max_keep": hi},
    )


SPECS = [
    register(StrategySpec(name=name, schema=schema, run=run, ranges={**ASSESSED_RANGES, **ranges}, checks=ASSESSED_CHECKS, prompts=ASSESSED_PROMPTS,
                          description=text))
    for name, schema, run, ranges, text in (
        ("three_agent", AssessedConfig, weighted_rerank, {}, "3-Agent: the three agents' weighted scores, top-k kept"),
        ("cot", AssessedConfig, weighted_rerank, {}, "CoT de-polarisation: agents reason before scoring"),
        ("sda", SDAConfig, score_distribution_alignment, {}, "SDA: percentile-rank alignment of each agent's scores"),
        ("sda_cot", SDAConfig, score_distribution_alignment, {}, "SDA+CoT: alignment over reasoned scores"),
        ("rrf", RRFConfig, reciprocal_rank_fusion, {"rrf_k": int_range(0)}, "RRF: reciprocal rank fusion of the agents' rankings"),
        ("atf", ATFConfig, adaptive_threshold_filtering, {"kappa": num_range(0.0), "min_keep": int_range(0)}, "ATF: keep documents above mu - kappa*sigma"),
    )
]
