"""MAIN-RAG (Chang et al., ACL 2025; summarised in paper/002), the three-agent filtering
pipeline the MADARA paper starts from; m extraction + m judge + 1 generation calls per query.

1. Predictor -- answers from each document alone: exactly PDE's extraction requests
   (stage ``pde-extract``), shared with PDE through the cache.
2. Judge -- one forward pass per (document, question, answer) reads ``log P(Yes) -
   log P(No)`` (stage ``main-rag-judge``); a candidate without a probability (an engine's
   top-n list) is floored at :data:`LOGPROB_FLOOR`; with neither the score is NaN and the
   document is dropped.
3. Adaptive filter -- keep scores >= ``mean - n * sigma`` (``strategy.main_rag_n``, 0: the
   mean), descending, with no cap at ``top_k`` (MAIN-RAG keeps all above the threshold).
4. Final-Predictor -- the ordinary generator over the kept documents (stage ``generate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from madara_cli.agents.matrix import ragged
from madara_cli.agents.prompts import judge_messages
from madara_cli.config.schema import StrategyConfig
from madara_cli.core.records import Completion, Example, Prediction, ScoreRequest
from madara_cli.core.vocabulary import JUDGE_STAGE  # the stage a cell's health counts the judge's scores under
from madara_cli.plugins import num_range, register
from madara_cli.strategies.assessed import selection_report
from madara_cli.strategies.context import StrategyContext, StrategySpec, generate_answers, rounded, support_coverage, with_extra
from madara_cli.strategies.pde import per_document_extraction
from madara_cli.strategies.selection import main_rag_select


@dataclass
class MainRAGConfig(StrategyConfig):
    main_rag_n: float = 0.0  # keep judge score >= mean - n*std

JUDGE_CANDIDATES = ("Yes", "No")
LOGPROB_FLOOR = -50.0


def judge_score(completion: Completion) -> float:
    """``log P(Yes) - log P(No)``; -inf floored at :data:`LOGPROB_FLOOR`; NaN if both missing."""
    lp = completion.logprobs or {}
    yes, no = lp.get("Yes", -math.inf), lp.get("No", -math.inf)
    if not math.isfinite(yes) and not math.isfinite(no):
        return math.nan
    return max(yes, LOGPROB_FLOOR) - max(no, LOGPROB_FLOOR)


def main_rag(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    n = ctx.settings_as(MainRAGConfig).main_rag_n
    picks = [list(range(len(ex.docs or ()))) for ex in examples]
    answers = per_document_extraction(ctx, examples, picks)
    prompts = ctx.prompts
    reqs = [
        ScoreRequest(messages=judge_messages(ex, doc, ans, prompts), candidates=JUDGE_CANDIDATES)
        for ex, per_doc in zip(examples, answers)
        for doc, (ans, _) in zip(ex.docs or (), per_doc)
    ]
    outs = ctx.llm.logprobs(JUDGE_STAGE, reqs) if reqs else []
    judged = [np.array([judge_score(c) for c in row], dtype=float) for row in ragged(outs, map(len, picks))]
    kept = [main_rag_select(s, n) for s in judged]
    selections = [[(ex.docs or ())[i] for i in idx] for ex, idx in zip(examples, kept)]
    preds = generate_answers(ctx, "generate", examples, selections)
    n_failed = int(sum(np.isnan(s).sum() for s in judged))
    n_total = int(sum(s.size for s in judged))
    ctx.report["selection"] = selection_report(kept)
    ctx.report["main_rag"] = {"n": n, "judge_failure_rate": round(n_failed / n_total, 6) if n_total else 0.0}

    def threshold(s: np.ndarray) -> float:
        finite = s[np.isfinite(s)]
        return float(finite.mean() - n * finite.std()) if finite.size else math.nan

    return [
        with_extra(pred, judge_scores=rounded(s), threshold=rounded([threshold(s)])[0], predictor_answers=[a for a, _ in per_doc], selected=idx,
                   **support_coverage(ex, pred.doc_ids))
        for ex, pred, s, idx, per_doc in zip(examples, preds, judged, kept, answers)
    ]


SPEC = register(StrategySpec(name="main_rag", schema=MainRAGConfig, run=main_rag, ranges={"main_rag_n": num_range()},
                             prompts=("judge",), description="MAIN-RAG: a Yes/No judge per document, kept above mean - n*std"))
