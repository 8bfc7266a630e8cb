"""``retriever=rerank``: the paper's generative reranker (Qwen3-0.6B, Table 5). The
first stage retrieves ``candidates`` documents, the engine scores each (question,
document) pair by P(yes) of a yes/no relevance judgement (:func:`rerank_request`), and
the top k by that score are kept."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from madara_cli.config.folders import prompts_of, shipped_prompt_set
from madara_cli.config.identity import family_digest
from madara_cli.config.prompt_sets import SAMPLE_DOCS, SAMPLE_EXAMPLES
from madara_cli.config.schema import FirstStage
from madara_cli.config.settings import Node, Settings
from madara_cli.core.errors import ConfigError, DataError
from madara_cli.core.records import Doc, ScoreRequest, messages
from madara_cli.plugins import register
from madara_cli.plugins.catalog import CATALOG
from madara_cli.plugins.shape import PromptFamily, int_range
from madara_cli.retrievers.bm25s import BM25_RANGES, BM25sConfig
from madara_cli.retrievers.spec import Ranked, RetrievalContext, RetrieverSpec


@dataclass
class RerankConfig(BM25sConfig):
    """``retriever=rerank``'s settings: the first stage's (bm25s', pyserini's, or dense's ``encoder``) and the reranker's own."""

    encoder: Optional[str] = None  # first_stage=dense: its encoder
    first_stage: FirstStage = FirstStage.bm25s  # retriever whose top candidates get reranked
    candidates: int = 50  # how many first-stage documents are reranked
    model: Optional[str] = None  # model config whose engine reranks (None = the cell's own model)


# Qwen3 models answer after an empty think block when thinking is off; Qwen3-Reranker
# was trained to judge right after it.
QWEN3_PREFIX = "<think>\n\n</think>\n\n"


def rerank_request(query: str, doc: Doc, prefix: str = "", prompts: Any = None) -> ScoreRequest:
    """Fields ``question`` (the query) and ``document``, rendered with ``prompts`` (a
    :class:`~madara_cli.config.prompt_sets.PromptSet`; the shipped set by default)."""
    ps = shipped_prompt_set() if prompts is None else prompts
    fields = {"question": query, "document": doc.render()}
    return ScoreRequest(messages=messages(ps.render("rerank_system", **fields), ps.render("rerank_user", **fields)), candidates=("yes", "no"), prefix=prefix)


def sample_requests(prompts: Any) -> list[ScoreRequest]:
    """The family's requests for the fixed sample its digest is taken over."""
    return [rerank_request(SAMPLE_EXAMPLES[0].question, SAMPLE_DOCS[0], prompts=prompts)]


# The generative reranker's prompt family: its wording is the prompt set's (Qwen3-Reranker's
# own format in the shipped set); it keys the snapshots and cells that rerank.
RERANK = PromptFamily("rerank", {"rerank_system": ("question", "document"), "rerank_user": ("question", "document")},
                      sample=sample_requests)


def relevance(logprobs: dict[str, float] | None) -> float:
    """P(yes) / (P(yes) + P(no)); 0 when the engine gave "yes" no mass."""
    y, n = (logprobs or {}).get("yes", -math.inf), (logprobs or {}).get("no", -math.inf)
    if y == -math.inf:
        return 0.0
    return 1.0 if n == -math.inf else 1.0 / (1.0 + math.exp(n - y))


def _template_closes_thinking(llm) -> bool:
    """Whether the engine renders Qwen3 with ``enable_thinking: false`` (the model's
    chat settings), whose generation prompt already ends with the empty think block."""
    settings = getattr(getattr(llm, "backend", None), "chat_settings", None)
    return bool(settings and settings.template_kwargs.get("enable_thinking") is False)


def reranker_name(cfg: Settings) -> str:
    return str(cfg.retriever.get("model") or cfg.model.name)


class GenerativeReranker:
    def __init__(self, rcfg: Node, ctx: RetrievalContext):
        if rcfg.first_stage == "rerank":
            raise DataError("retriever.first_stage cannot be rerank")
        if ctx.llm is None:
            raise DataError(f"retriever=rerank scores documents with an LLM ({reranker_name(ctx.cfg)}), but none was passed to retrieve(); "
                            "run it through 'madara run' so the runner provides the engine")
        self.rcfg, self.ctx = rcfg, ctx
        self.first = CATALOG.get("retriever", str(rcfg.first_stage)).build(rcfg, ctx)
        self.llm = ctx.llm
        self.prefix = QWEN3_PREFIX if reranker_name(ctx.cfg).lower().startswith("qwen3") and not _template_closes_thinking(self.llm) else ""

    def _rerank(self, queries: Sequence[str], candidates: Sequence[Ranked]) -> list[Ranked]:
        prompts = prompts_of(self.ctx.cfg)
        reqs = [rerank_request(q, d, self.prefix, prompts) for q, cands in zip(queries, candidates, strict=False) for d, _ in cands]
        comps = self.llm.logprobs("rerank", reqs) if reqs else []
        out, i = [], 0
        for cands in candidates:
            scored = [(d, relevance(comps[i + j].logprobs), j) for j, (d, _) in enumerate(cands)]
            i += len(cands)
            scored.sort(key=lambda t: (-t[1], t[2]))  # ties keep the first stage's order
            out.append([(d, s) for d, s, _ in scored])
        return out

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        c = int(self.rcfg.candidates)
        first = self.first.rank_pools(queries, pools)
        top = self._rerank(queries, [r[:c] for r in first])
        return [t + [(d, -1.0) for d, _ in r[c:]] for t, r in zip(top, first, strict=False)]

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        first = self.first.search(queries, max(int(self.rcfg.candidates), k))
        return [r[:k] for r in self._rerank(queries, first)]


def _check(cfg: Settings) -> None:
    if int(cfg.retriever.candidates) < int(cfg.retriever.k):
        raise ConfigError(f"retriever.candidates={cfg.retriever.candidates} is below retriever.k={cfg.retriever.k}: "
                          "the reranker must see at least k documents")


def _identity(cfg: Settings) -> dict[str, Any]:
    """What of the run besides its own node changes the documents it keeps: the model that
    ranks and the words it is asked in (the prompt set's rerank templates)."""
    return {"model": reranker_name(cfg), "prompts": {"rerank": family_digest(sample_requests(prompts_of(cfg)))}}


SPEC = register(RetrieverSpec(
    name="rerank", schema=RerankConfig, build=GenerativeReranker, uses_engine=True, engine_model="model", stand_in="first_stage",
    prompts=(RERANK,), key=_identity, checks=(_check,), ranges={**BM25_RANGES, "candidates": int_range(1)},
    description="the paper's generative reranker: an LLM's P(yes) over first-stage candidates",
))
