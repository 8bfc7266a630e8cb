"""Digests of every prompt template, by family, for cell identity.

A cell's key must change when a prompt it sends changes, or a cell finished before
the edit is reported as done. The words are the templates of the cell's prompt set
(``cfg.prompts``; :mod:`madara_cli.config.prompt_sets`) and the glue is in the
request builders, so a digest of the template files alone would miss edits of the
builders. Instead each family's builders render a fixed synthetic example (a factoid
question and a FEVER claim, two documents) in every mode they have, with the loaded
set, and the digest is the hash of those rendered requests: an edit anywhere in a
template file or a builder changes it, and nothing else does (comments, docstrings,
refactors, and a set of another name with the same text keep the keys).

Families: ``generator`` (every strategy), ``assessors`` (the three agents in base,
CoT and logprob form, plus the RSC re-score prefix), ``detector`` (the Conflict
Detector's one request per query, ``strategy.conflict=per_query``), ``judge`` (MAIN-RAG's Yes/No
judge), ``rerank`` (the generative reranker's prompt) and ``rescore`` (the RSC
probe's forced re-score prompt; in the probe's key and MADARA cells').
"""

from __future__ import annotations

import hashlib
import json

from madara_cli.config.folders import shipped_prompt_set
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.records import ChatRequest, Doc, Example, ScoreRequest
from madara_cli.retrievers.spec import retriever_spec

FAMILIES = ("generator", "assessors", "detector", "judge", "rerank", "rescore")

# Families a strategy declared when it registered (STRATEGIES.register(..., prompts=...)):
# each strategy, shipped or plug-in, says what it sends, and exactly that keys its cells.
_DECLARED: dict[str, tuple[str, ...]] = {}


def declare_families(strategy: str, families: tuple[str, ...]) -> None:
    """Record the prompt families ``strategy`` sends beside the generator's."""
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"strategy '{strategy}' declares unknown prompt families {bad}; valid: {', '.join(FAMILIES)}")
    _DECLARED[strategy] = tuple(f for f in families if f != "generator")
_DEFAULT_FAMILIES = ("assessors", "detector")  # 3-Agent, CoT, SDA, SDA+CoT, ATF, PDE (+ablations), RRF, MADARA

_DOCS = (Doc("d1", "Ada Quill was born in Varn in 1901.", "Ada Quill"), Doc("d2", "Varn is a river town.", "Varn"))
_EXAMPLES = (
    Example("q", "Where was Ada Quill born?", ("Varn",), _DOCS, "factoid"),
    Example("c", "Ada Quill was born in Varn.", ("SUPPORTS",), _DOCS, "fever"),
)


def _canonical(requests: list[ChatRequest | ScoreRequest]) -> str:
    return json.dumps([r.canonical() for r in requests], sort_keys=True, ensure_ascii=False)


def _render(family: str, prompts: PromptSet) -> list[ChatRequest | ScoreRequest]:
    if family == "generator":
        from madara_cli.agents.generator import generation_request

        return [
            generation_request(ex, docs, 32, 0.0, 0, style=style, prompts=prompts)
            for style in ("zeroshot", "oneshot")
            for docs in (_DOCS, _DOCS[:1])
            for ex in _EXAMPLES
        ]
    if family == "assessors":
        from madara_cli.agents.prompts import AGENTS
        from madara_cli.agents.requests import agent_request, rescore_request

        out: list[ChatRequest | ScoreRequest] = []
        for ex in _EXAMPLES:
            for agent in AGENTS:
                for cot, mode in ((False, "generate"), (True, "generate"), (False, "logprob")):
                    out.append(agent_request(ex, _DOCS, 0, agent, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0, prompts=prompts))
        normal = out[1]
        assert isinstance(normal, ChatRequest)
        out += [rescore_request(normal, ["a step.", "another."], mode=m, max_tokens=64, confidence=3) for m in ("generate", "logprob")]
        return out
    if family == "detector":
        from madara_cli.agents.requests import conflict_request

        return [
            conflict_request(ex, _DOCS, cot=cot, mode=mode, max_tokens=64, temperature=0.0, seed=0, prompts=prompts)
            for ex in _EXAMPLES
            for cot, mode in ((False, "generate"), (True, "generate"), (False, "logprob"))
        ]
    if family == "rescore":
        from madara_cli.agents.requests import forced_rescore_request

        steps = ["a step.", "another."]
        return [
            forced_rescore_request(ex, _DOCS[0], steps, mode=m, max_tokens=64, temperature=0.0, seed=0, prompts=prompts)
            for ex in _EXAMPLES
            for m in ("generate", "logprob")
        ]
    if family == "judge":
        from madara_cli.agents.prompts import judge_messages

        return [ChatRequest(messages=judge_messages(ex, _DOCS[0], "Varn", prompts)) for ex in _EXAMPLES]
    if family == "rerank":
        from madara_cli.retrievers.rerank import rerank_request

        return [rerank_request(_EXAMPLES[0].question, _DOCS[0], prompts=prompts)]
    raise ValueError(f"unknown prompt family '{family}'; valid: {', '.join(FAMILIES)}")


_DIGESTS: dict[tuple[str, str], str] = {}


def prompt_digest(family: str, prompts: PromptSet | None = None) -> str:
    """sha256 (16 hex digits) of the family's requests rendered with ``prompts`` (the
    shipped set by default)."""
    ps = shipped_prompt_set() if prompts is None else prompts
    key = (family, ps.sha)
    if key not in _DIGESTS:
        _DIGESTS[key] = hashlib.sha256(_canonical(_render(family, ps)).encode("utf-8")).hexdigest()[:16]
    return _DIGESTS[key]


def prompt_digests(strategy: str, retriever: str = "bm25s", prompts: PromptSet | None = None) -> dict[str, str]:
    """The digests of every family a cell of ``strategy`` (with ``retriever``) sends,
    in the words of ``prompts`` (the cell's set; the shipped one by default)."""
    declared = _DECLARED.get(strategy)
    families = ["generator", *(declared if declared is not None else _DEFAULT_FAMILIES)]
    spec = retriever_spec(retriever)
    families += [f for f in (spec.prompts if spec is not None else ()) if f not in families]
    return {f: prompt_digest(f, prompts) for f in families}
