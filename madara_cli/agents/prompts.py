"""Request builders of the three document assessors, the Conflict Detector, MAIN-RAG's
judge and the RSC forced re-score: they compute the fields and render the templates of a
prompt set (:mod:`madara_cli.config.prompt_sets`; the shipped words are
``configs/prompts/madara/``, a cell's set is ``cfg.prompts``).

Written from the MADARA paper's agent descriptions (Section 4, Appendix N): one base
model plays three roles, each scoring one document on a 0-5 guide in JSON. The
**Relevance Assessor** sees the question and the document; the **Consistency Verifier**
and the **Conflict Detector** also see the other documents, the detector reporting an
*adjustment* in -2..+2 (:func:`madara_cli.agents.parsing.conflict_to_score` maps it).
CoT variants (Section 4.1) require five named reasoning steps and add
``reasoning_steps`` and ``confidence`` (1-5) ahead of the score. In ``logprob`` mode
``-1`` and ``-2`` share the token ``-``, so the detector is asked on the 0-5 scale whose
anchors are the adjustments' images (``conflict_logprob_system``: 0 = -2, 2.5 = 0, 5 = +2).

The other documents appear as ~200-character excerpts cut at a word boundary (a
ten-document context stays near 600 tokens); the assessed document is shown in full.
Every user turn ends with a one-line reminder of the reply format: small models follow
the last instruction they read far more often than the system prompt. FEVER queries
are claims (``Claim:``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from madara_cli.config.folders import shipped_prompt_set
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.core.records import Doc, Example, Message, messages
from madara_cli.core.vocabulary import AGENTS, CONFLICT, CONSISTENCY, RELEVANCE  # noqa: F401  (the agents' names)

EXCERPT_CHARS = 200

# The JSON field each agent's generated answer carries, and its valid range.
SCORE_KEY: dict[str, str] = {RELEVANCE: "score", CONSISTENCY: "score", CONFLICT: "adjustment"}


def _set(prompts: PromptSet | None) -> PromptSet:
    return shipped_prompt_set() if prompts is None else prompts


def _mode(agent: str, cot: bool, logprob: bool) -> str:
    """The template stem of ``agent`` in a scoring mode: ``relevance``, ``relevance_cot``, ``relevance_logprob``."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent '{agent}'; valid: {', '.join(AGENTS)}")
    if logprob and cot:
        raise ValueError("logprob scoring has no CoT variant")
    return agent + ("_logprob" if logprob else "_cot" if cot else "")


def excerpt(doc: Doc, chars: int = EXCERPT_CHARS) -> str:
    """The first ``chars`` characters of a document, cut at a word boundary."""
    return _excerpt(doc.render(), chars)


@lru_cache(maxsize=4096)  # each document is excerpted for every other one it is scored beside, cell after cell
def _excerpt(rendered: str, chars: int) -> str:
    text = " ".join(rendered.split())
    if len(text) <= chars:
        return text
    cut = text[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars // 2 else cut).rstrip(" ,;:") + " ..."


def _query_fields(example: Example, prompts: PromptSet) -> dict[str, str]:
    """``query`` (the labelled line: ``question_line`` or, for FEVER, ``claim_line``)
    and the query's text as ``question`` and ``claim``."""
    q = example.question
    line = prompts.render("claim_line", claim=q) if example.task == "fever" else prompts.render("question_line", question=q)
    return {"query": line, "question": q, "claim": q}


def assessor_messages(
    example: Example, docs: Sequence[Doc], index: int, agent: str, cot: bool = False, logprob: bool = False, prompts: PromptSet | None = None
) -> tuple[Message, ...]:
    """System prompt and user turn of ``agent`` assessing ``docs[index]``: fields
    ``query``, ``question``/``claim``, ``index`` (the retrieval rank, from 1),
    ``document`` (in full) and ``other_documents`` (the rest as ``[rank] excerpt``
    lines, ``(none)`` without any; the shipped relevance assessor does not show them)."""
    ps = _set(prompts)
    stem = _mode(agent, cot, logprob)
    others = [f"[{j + 1}] {excerpt(d)}" for j, d in enumerate(docs) if j != index]
    fields = {**_query_fields(example, ps), "index": index + 1, "document": docs[index].render(),
              "other_documents": "\n".join(others) if others else "(none)"}
    return messages(ps.render(stem + "_system", **fields), ps.render(stem + "_user", **fields))


# --- Conflict Detector, one call per query (strategy.conflict=per_query, the default) ---
# Appendix N: it receives the question and "a list of claim summaries from each retrieved
# document with document IDs" and returns ``doc_adjustments`` for all of them. The
# summaries are the excerpts the Consistency Verifier gets, under their retrieval rank
# (:func:`madara_cli.agents.parsing.parse_doc_adjustments` reads the reply).

DOC_ADJUSTMENTS = "doc_adjustments"


def detector_messages(example: Example, docs: Sequence[Doc], cot: bool = False, prompts: PromptSet | None = None) -> tuple[Message, ...]:
    """The per-query detector's request: fields ``query``, ``question``/``claim``,
    ``documents`` (every document's excerpt under its number, ``(none)`` without any),
    ``ids`` (``1 to m``, or ``1``) and ``count`` (m)."""
    ps = _set(prompts)
    stem = "detector_cot" if cot else "detector"
    fields = {**_query_fields(example, ps), "documents": "\n".join(f"[{j + 1}] {excerpt(d)}" for j, d in enumerate(docs)) or "(none)",
              "ids": f"1 to {len(docs)}" if len(docs) > 1 else "1", "count": len(docs)}
    return messages(ps.render(stem + "_system", **fields), ps.render(stem + "_user", **fields))


# --- MAIN-RAG judge (Chang et al., ACL 2025): Yes/No on (document, question, answer) ---


def judge_messages(example: Example, doc: Doc, answer: str, prompts: PromptSet | None = None) -> tuple[Message, ...]:
    """Fields ``document``, ``question``/``claim`` and ``answer`` (the candidate answer
    or, for FEVER, verdict); the FEVER user turn is ``judge_fever_user``."""
    ps = _set(prompts)
    fields = {"document": doc.render(), "question": example.question, "claim": example.question, "answer": answer}
    user = "judge_fever_user" if example.task == "fever" else "judge_user"
    return messages(ps.render("judge_system", **fields), ps.render(user, **fields))


# --- RSC forced re-score (Appendix F.1, rsc.rescore=forced) ---
# The assessor is handed an analysis it did not write and must score from it.

# The authors' forced-reasoning prompt shows at most this much of the document: the
# score is meant to come from the analysis, so the document is context, not the source.
RESCORE_DOC_CHARS = 2000
RESCORE_BEGIN = "<<< PREVIOUS ANALYSIS >>>"
RESCORE_END = "<<< END OF PREVIOUS ANALYSIS >>>"


def _analysis_block(steps: Sequence[str]) -> str:
    # A chain that quotes a marker must not close the block early: the markers are ours alone.
    lines = [" ".join(str(s).replace(RESCORE_BEGIN, "").replace(RESCORE_END, "").split()) for s in steps]
    return "\n".join(f"- {line}" for line in lines if line)


# An empty chain's analysis under reading.empty_chain=placeholder (madara's words).
EMPTY_CHAIN_PLACEHOLDER = "(there is no previous analysis)"


def _analysis_as_written(steps: Sequence[str]) -> str:
    # reading.requests=authors: one "- step" line per step as the chain holds it (the
    # authors' code collapses nothing), the bare placeholder for an empty chain; the
    # markers are still taken out, for the reason above.
    if not steps:
        return EMPTY_CHAIN_PLACEHOLDER
    return "\n".join(f"- {str(s).replace(RESCORE_BEGIN, '').replace(RESCORE_END, '')}" for s in steps)


def forced_rescore_messages(example: Example, doc: Doc, steps: Sequence[str], prompts: PromptSet | None = None,
                            shape: str = "madara") -> tuple[Message, ...]:
    """Fields ``query``, ``question``/``claim``, ``document`` (cut to
    :data:`RESCORE_DOC_CHARS`), ``chain`` (one ``- step`` line per perturbed step, the
    markers taken out) and the delimiting markers ``analysis_begin`` / ``analysis_end``.
    ``shape`` (``reading.requests``): ``madara`` marks a cut document with `` ...``,
    collapses whitespace inside steps and drops empty ones; ``authors`` shows the first
    2,000 characters as they are and each step as written (an empty chain as
    :data:`EMPTY_CHAIN_PLACEHOLDER`), as the authors' code does."""
    ps = _set(prompts)
    text = doc.render()
    if len(text) > RESCORE_DOC_CHARS:
        text = text[:RESCORE_DOC_CHARS] + ("" if shape == "authors" else " ...")
    chain = _analysis_as_written(steps) if shape == "authors" else _analysis_block(steps)
    fields = {**_query_fields(example, ps), "document": text, "chain": chain,
              "analysis_begin": RESCORE_BEGIN, "analysis_end": RESCORE_END}
    return messages(ps.render("rescore_system", **fields), ps.render("rescore_user", **fields))
