"""Digests of every prompt template, by family, for cell identity.

A cell's key must change when a prompt it sends changes, or a cell finished before
the edit is reported as done. Templates are partly module constants and partly
f-strings inside the request builders, so a digest of constants would miss edits.
Instead each family's builders render a fixed synthetic example (a factoid question
and a FEVER claim, two documents) in every mode they have, and the digest is the
hash of those rendered requests: an edit anywhere in a template changes it, and
nothing else does (comments, docstrings and refactors that render the same text keep
the keys).

Families: ``generator`` (every strategy), ``assessors`` (the three agents in base,
CoT and logprob form, plus the RSC re-score prefix), ``detector`` (the Conflict
Detector's one request per query, ``strategy.conflict=per_query``), ``judge`` (MAIN-RAG's Yes/No
judge), ``rerank`` (the generative reranker's prompt) and ``rescore`` (the RSC
probe's forced re-score prompt; in the probe's key and MADARA cells').
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

from madara_cli.records import ChatRequest, Doc, Example, ScoreRequest

FAMILIES = ("generator", "assessors", "detector", "judge", "rerank", "rescore")

# Which families a strategy's requests come from (beyond the generator, which all use).
_STRATEGY_FAMILIES = {
    "nf": (),
    "self_consistency": (),
    "cross_encoder": (),
    "main_rag": ("judge",),
    "madara": ("assessors", "rescore"),  # its probe re-scores through the forced prompt
}
_DEFAULT_FAMILIES = ("assessors", "detector")  # 3-Agent, CoT, SDA, SDA+CoT, ATF, PDE (+ablations), RRF, MADARA

_DOCS = (Doc("d1", "Ada Quill was born in Varn in 1901.", "Ada Quill"), Doc("d2", "Varn is a river town.", "Varn"))
_EXAMPLES = (
    Example("q", "Where was Ada Quill born?", ("Varn",), _DOCS, "factoid"),
    Example("c", "Ada Quill was born in Varn.", ("SUPPORTS",), _DOCS, "fever"),
)


def _canonical(requests: list[ChatRequest | ScoreRequest]) -> str:
    return json.dumps([r.canonical() for r in requests], sort_keys=True, ensure_ascii=False)


def _render(family: str) -> list[ChatRequest | ScoreRequest]:
    if family == "generator":
        from madara_cli.agents.generator import generation_request

        return [
            generation_request(ex, docs, 32, 0.0, 0, style=style)
            for style in ("zeroshot", "oneshot")
            for docs in (_DOCS, _DOCS[:1])
            for ex in _EXAMPLES
        ]
    if family == "assessors":
        from madara_cli.agents.prompts import AGENTS
        from madara_cli.agents.scoring import agent_request, rescore_request

        out: list[ChatRequest | ScoreRequest] = []
        for ex in _EXAMPLES:
            for agent in AGENTS:
                for cot, mode in ((False, "generate"), (True, "generate"), (False, "logprob")):
                    out.append(agent_request(ex, _DOCS, 0, agent, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0))
        normal = out[1]
        assert isinstance(normal, ChatRequest)
        out += [rescore_request(normal, ["a step.", "another."], mode=m, max_tokens=64, confidence=3) for m in ("generate", "logprob")]
        return out
    if family == "detector":
        from madara_cli.agents.scoring import conflict_request

        return [
            conflict_request(ex, _DOCS, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0)
            for ex in _EXAMPLES
            for cot, mode in ((False, "generate"), (True, "generate"), (False, "logprob"))
        ]
    if family == "rescore":
        from madara_cli.agents.scoring import forced_rescore_request

        steps = ["a step.", "another."]
        return [
            forced_rescore_request(ex, _DOCS[0], steps, mode=m, max_tokens=64, temperature=0.0, seed=0)
            for ex in _EXAMPLES
            for m in ("generate", "logprob")
        ]
    if family == "judge":
        from madara_cli.agents.prompts import judge_messages

        return [ChatRequest(messages=judge_messages(ex, _DOCS[0], "Varn")) for ex in _EXAMPLES]
    if family == "rerank":
        from madara_cli.data.retrieval import rerank_request

        return [rerank_request(_EXAMPLES[0].question, _DOCS[0])]
    raise ValueError(f"unknown prompt family '{family}'; valid: {', '.join(FAMILIES)}")


@cache
def prompt_digest(family: str) -> str:
    """sha256 (16 hex digits) of the family's rendered templates."""
    return hashlib.sha256(_canonical(_render(family)).encode("utf-8")).hexdigest()[:16]


def prompt_digests(strategy: str, retriever: str = "bm25s") -> dict[str, str]:
    """The digests of every family a cell of ``strategy`` (with ``retriever``) sends."""
    families = ["generator", *_STRATEGY_FAMILIES.get(strategy, _DEFAULT_FAMILIES)]
    if retriever == "rerank":
        families.append("rerank")
    return {f: prompt_digest(f) for f in families}
