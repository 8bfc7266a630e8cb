"""The prompt families the shipped agents send: templates, the fields each may use, and
the requests its builders render for the fixed sample
(:data:`madara_cli.config.prompt_sets.SAMPLE_EXAMPLES`), whose digest keys every cell that
sends the family (:func:`madara_cli.config.identity.family_digest`): an edit in a template
or a builder changes it, and nothing else does. ``shared`` (the labelled query line),
``generator`` (Appendix N's generators, and ``generation.style=oneshot``'s example),
``assessors`` (base, CoT, logprob, the RSC re-score prefix), ``detector`` (per query),
``judge`` (MAIN-RAG) and ``rescore`` (the RSC probe's forced re-score). The reranker's
family is declared with it (:mod:`madara_cli.retrievers.rerank`); a plug-in brings its own.
"""

from __future__ import annotations

from typing import Any

from madara_cli.config.prompt_sets import SAMPLE_DOCS, SAMPLE_EXAMPLES
from madara_cli.plugins import PromptFamily, register

_QUERY = ("query", "question", "claim")  # the labelled query line, and the query's text under either name
_ASSESSOR_FIELDS = (*_QUERY, "index", "document", "other_documents")
_STEPS = ["a step.", "another."]
_MODES = ((False, "generate"), (True, "generate"), (False, "logprob"))  # (cot, scoring): base, CoT, logprob


def _generator(prompts: Any) -> list:
    from madara_cli.agents.generator import generation_request

    return [
        generation_request(ex, docs, 32, 0.0, 0, style=style, prompts=prompts)
        for style in ("zeroshot", "oneshot")
        for docs in (SAMPLE_DOCS, SAMPLE_DOCS[:1])
        for ex in SAMPLE_EXAMPLES
    ]


def _assessors(prompts: Any) -> list:
    from madara_cli.agents.prompts import AGENTS
    from madara_cli.agents.requests import agent_request, rescore_request

    out = [
        agent_request(ex, SAMPLE_DOCS, 0, agent, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0, prompts=prompts)
        for ex in SAMPLE_EXAMPLES for agent in AGENTS for cot, mode in _MODES
    ]
    normal = out[1]
    out += [rescore_request(normal, _STEPS, mode=m, max_tokens=64, confidence=3) for m in ("generate", "logprob")]
    return out


def _detector(prompts: Any) -> list:
    from madara_cli.agents.requests import conflict_request

    return [
        conflict_request(ex, SAMPLE_DOCS, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0, prompts=prompts)
        for ex in SAMPLE_EXAMPLES
        for cot, mode in _MODES
    ]


def _rescore(prompts: Any) -> list:
    from madara_cli.agents.requests import forced_rescore_request

    return [
        forced_rescore_request(ex, SAMPLE_DOCS[0], _STEPS, mode=m, max_tokens=64, temperature=0.0, seed=0, prompts=prompts)
        for ex in SAMPLE_EXAMPLES
        for m in ("generate", "logprob")
    ]


def _judge(prompts: Any) -> list:
    from madara_cli.agents.prompts import judge_messages
    from madara_cli.core.records import ChatRequest

    return [ChatRequest(messages=judge_messages(ex, SAMPLE_DOCS[0], "Varn", prompts)) for ex in SAMPLE_EXAMPLES]


SHARED = register(PromptFamily("shared", {"question_line": ("question",), "claim_line": ("claim",)}))

_GEN = ("documents", "question", "claim")
GENERATOR = register(PromptFamily("generator", {
    "factoid_system": _GEN, "factoid_user": _GEN, "fever_system": _GEN, "fever_user": _GEN,
    "factoid_oneshot_documents": (), "factoid_oneshot_question": (), "factoid_oneshot_answer": (),
    "fever_oneshot_documents": (), "fever_oneshot_question": (), "fever_oneshot_answer": (),
}, sample=_generator))

ASSESSORS = register(PromptFamily("assessors", {
    f"{agent}{mode}_{turn}": _ASSESSOR_FIELDS
    for agent in ("relevance", "consistency", "conflict")
    for mode in ("", "_cot", "_logprob")
    for turn in ("system", "user")
}, sample=_assessors))

DETECTOR = register(PromptFamily("detector", {
    f"detector{mode}_{turn}": (*_QUERY, "documents", "ids", "count") for mode in ("", "_cot") for turn in ("system", "user")
}, sample=_detector))

_JUDGE = ("document", "question", "claim", "answer")
JUDGE = register(PromptFamily("judge", {"judge_system": _JUDGE, "judge_user": _JUDGE, "judge_fever_user": _JUDGE},
                                     sample=_judge))

_RESCORE = (*_QUERY, "document", "chain", "analysis_begin", "analysis_end")
RESCORE = register(PromptFamily("rescore", {"rescore_system": _RESCORE, "rescore_user": _RESCORE}, sample=_rescore))
