"""System prompts and user turns of the three document assessors and MAIN-RAG's judge.

Written from the agent descriptions in the MADARA paper (Section 4 and Appendix N):
one shared base model plays three structurally distinct roles, each scoring one
retrieved document on a 0-5 guide and answering in JSON.

* **Relevance Assessor** -- does *this* document help answer the question? Sees the
  question and the one document.
* **Consistency Verifier** -- does what the document says agree with the other
  retrieved documents? Sees the document plus short excerpts of the others.
* **Conflict Detector** -- is the document on the well-supported side of a
  disagreement between documents, or part of a conflict? Sees the same context as
  the verifier and reports an *adjustment* in -2..+2, not a 0-5 score
  (:func:`madara_cli.agents.scoring.conflict_to_score` maps it into the matrix).

The CoT variants (Section 4.1, "CoT De-Polarization") keep each role and its guide
but require five named reasoning steps first, and add ``reasoning_steps`` (one string
per step) and ``confidence`` (1-5) to the JSON, ahead of the score.

``logprob`` scoring reads the next-token distribution after the assistant has
written ``{"score": `` (one forward pass, no sampling). A negative adjustment
cannot be read off a single next token (``-1`` and ``-2`` share the token ``-``),
so in that mode the Conflict Detector gets :data:`CONFLICT_LOGPROB_SYSTEM`: the
same judgement, asked directly on the 0-5 scale whose anchors are the images of the
adjustments under the mapping (0 = -2, 2.5 = 0, 5 = +2).

The other documents appear as excerpts (their first ~200 characters, cut at a word
boundary) so that a ten-document context stays near 600 tokens; the document under
assessment is always shown in full. Every user turn ends with a one-line reminder
of the reply format: small models follow the last instruction they read far more
often than the system prompt.

For FEVER examples (``Example.task == "fever"``) the question is a claim to verify:
the user turn labels it ``Claim:`` and the shared preamble and the relevance guide
cover claims.
"""

from __future__ import annotations

from typing import Sequence

from madara_cli.records import Doc, Example, Message, messages

RELEVANCE, CONSISTENCY, CONFLICT = "relevance", "consistency", "conflict"
AGENTS: tuple[str, str, str] = (RELEVANCE, CONSISTENCY, CONFLICT)
AGENT_TITLES = {RELEVANCE: "Relevance Assessor", CONSISTENCY: "Consistency Verifier", CONFLICT: "Conflict Detector"}

EXCERPT_CHARS = 200

_TEAM = (
    "You are one of three reviewers who check retrieved documents before a question is answered "
    "(or before a claim is verified). You review exactly one document, the one marked as the document to assess."
)

_JSON_SCORE = 'Respond with a single JSON object and nothing else: {"score": N} where N is an integer from 0 to 5.'
_JSON_ADJ = 'Respond with a single JSON object and nothing else: {"adjustment": N} where N is an integer from -2 to 2.'


def _cot_json(key: str, value: str) -> str:
    return (
        "Write your answer as a single JSON object and nothing else, with the fields in this order:\n"
        '{"reasoning_steps": ["step 1 ...", "step 2 ...", "step 3 ...", "step 4 ...", "step 5 ..."], '
        f'"confidence": C, "{key}": {value}}}\n'
        "reasoning_steps holds one short sentence per step, five in total; confidence is an integer from 1 (guessing) "
        "to 5 (certain) saying how sure you are of your judgement."
    )


_RELEVANCE_ROLE = (
    "Your role: Relevance Assessor. Decide how useful the document is for answering the question, "
    "judging this document on its own."
)
_RELEVANCE_GUIDE = (
    "Scoring guide:\n"
    "5 = the document states the answer (or the fact that settles the claim) explicitly.\n"
    "4 = the document gives strong evidence; the answer follows with a small inference.\n"
    "3 = the document has related facts that partly help, but not the answer itself.\n"
    "2 = the document is about the same entity or topic but does not help answer.\n"
    "1 = the document only shares a few words with the question.\n"
    "0 = the document is unrelated to the question."
)
_RELEVANCE_STEPS = (
    "Reason in five steps before scoring:\n"
    "1. Identify the key entities of the question and what it asks for.\n"
    "2. Check whether the document mentions those entities.\n"
    "3. Assess whether the document gives direct evidence for an answer.\n"
    "4. Consider whether that evidence applies to the right time and context.\n"
    "5. Choose the score from the guide."
)

_CONSISTENCY_ROLE = (
    "Your role: Consistency Verifier. Decide whether what the document says about the question agrees with "
    "the other retrieved documents, which you see as short excerpts."
)
_CONSISTENCY_GUIDE = (
    "Scoring guide:\n"
    "5 = its statements about the question are confirmed by several other documents.\n"
    "4 = confirmed by at least one other document and contradicted by none.\n"
    "3 = the other documents neither confirm nor contradict it.\n"
    "2 = partly at odds with other documents, or it says nothing that bears on the question.\n"
    "1 = contradicted by most of the documents that address the same point.\n"
    "0 = flatly contradicted by the other documents."
)
_CONSISTENCY_STEPS = (
    "Reason in five steps before scoring:\n"
    "1. Extract what the document claims that bears on the question.\n"
    "2. Find the other documents that address the same point.\n"
    "3. Note which of them agree and which disagree with the document.\n"
    "4. Weigh how many documents agree or disagree, and how directly.\n"
    "5. Choose the score from the guide."
)

_CONFLICT_ROLE = (
    "Your role: Conflict Detector. Retrieved documents can disagree about the answer, and some may contain "
    "altered facts (for example a name, place or date swapped for another). Decide whether the document sides "
    "with the answer that is best supported across the documents, or takes part in a conflict. "
    "You see the other documents as short excerpts."
)
_CONFLICT_GUIDE = (
    "Adjustment guide:\n"
    "+2 = it agrees with the answer most documents support, and no document contradicts it.\n"
    "+1 = it leans towards the well-supported answer.\n"
    " 0 = it takes no part in any disagreement about the answer (neutral or unrelated).\n"
    "-1 = it disagrees with some documents about the answer and the support is unclear.\n"
    "-2 = it contradicts the answer that most documents support; it is probably wrong or altered."
)
_CONFLICT_SCORE_GUIDE = (
    "Scoring guide:\n"
    "5 = it agrees with the answer most documents support, and no document contradicts it.\n"
    "4 = it leans towards the well-supported answer.\n"
    "2 or 3 = it takes no part in any disagreement about the answer (neutral or unrelated).\n"
    "1 = it disagrees with some documents about the answer and the support is unclear.\n"
    "0 = it contradicts the answer that most documents support; it is probably wrong or altered."
)
_CONFLICT_STEPS = (
    "Reason in five steps before deciding:\n"
    "1. List the candidate answers that the documents give.\n"
    "2. Determine which candidate has the most support.\n"
    "3. Identify which candidate this document supports, if any.\n"
    "4. Judge whether this document is part of a contradiction.\n"
    "5. Choose the adjustment from the guide."
)


def _join(*parts: str) -> str:
    return "\n\n".join(parts)


BASE_SYSTEM: dict[str, str] = {
    RELEVANCE: _join(_TEAM, _RELEVANCE_ROLE, _RELEVANCE_GUIDE, _JSON_SCORE),
    CONSISTENCY: _join(_TEAM, _CONSISTENCY_ROLE, _CONSISTENCY_GUIDE, _JSON_SCORE),
    CONFLICT: _join(_TEAM, _CONFLICT_ROLE, _CONFLICT_GUIDE, _JSON_ADJ),
}

COT_SYSTEM: dict[str, str] = {
    RELEVANCE: _join(_TEAM, _RELEVANCE_ROLE, _RELEVANCE_GUIDE, _RELEVANCE_STEPS, _cot_json("score", "N (integer 0-5)")),
    CONSISTENCY: _join(_TEAM, _CONSISTENCY_ROLE, _CONSISTENCY_GUIDE, _CONSISTENCY_STEPS, _cot_json("score", "N (integer 0-5)")),
    CONFLICT: _join(_TEAM, _CONFLICT_ROLE, _CONFLICT_GUIDE, _CONFLICT_STEPS, _cot_json("adjustment", "N (integer -2 to 2)")),
}

CONFLICT_LOGPROB_SYSTEM = _join(_TEAM, _CONFLICT_ROLE, _CONFLICT_SCORE_GUIDE, _JSON_SCORE)

# The JSON field each agent's generated answer carries, and its valid range.
SCORE_KEY: dict[str, str] = {RELEVANCE: "score", CONSISTENCY: "score", CONFLICT: "adjustment"}


def system_prompt(agent: str, cot: bool = False, logprob: bool = False) -> str:
    if agent not in AGENTS:
        raise ValueError(f"unknown agent '{agent}'; valid: {', '.join(AGENTS)}")
    if logprob:
        if cot:
            raise ValueError("logprob scoring has no CoT variant")
        return CONFLICT_LOGPROB_SYSTEM if agent == CONFLICT else BASE_SYSTEM[agent]
    return (COT_SYSTEM if cot else BASE_SYSTEM)[agent]


def excerpt(doc: Doc, chars: int = EXCERPT_CHARS) -> str:
    """The first ``chars`` characters of a document, cut at a word boundary."""
    text = " ".join(doc.render().split())
    if len(text) <= chars:
        return text
    cut = text[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars // 2 else cut).rstrip(" ,;:") + " ..."


def _query_line(example: Example) -> str:
    return f"Claim: {example.question}" if example.task == "fever" else f"Question: {example.question}"


def _reminder(agent: str, cot: bool) -> str:
    key, scale = (SCORE_KEY[agent], "-2 to 2") if agent == CONFLICT else ("score", "0 to 5")
    if cot:
        return f'Reply with the JSON object only: five reasoning_steps, then confidence (1 to 5), then "{key}" ({scale}).'
    return f'Reply with the JSON object only: {{"{key}": N}} with N from {scale}.'


def assessor_user(example: Example, docs: Sequence[Doc], index: int, agent: str, cot: bool = False, logprob: bool = False) -> str:
    """The user turn for ``agent`` assessing ``docs[index]``. The relevance assessor
    sees the document alone; the other two also see excerpts of the rest, labelled by
    retrieval rank. The turn ends with a one-line reminder of the reply format (small
    models follow the last instruction they read far better than the system prompt)."""
    doc = docs[index]
    parts = [_query_line(example), f"Document to assess [{index + 1}]:\n{doc.render()}"]
    if agent != RELEVANCE:
        others = [f"[{j + 1}] {excerpt(d)}" for j, d in enumerate(docs) if j != index]
        parts.append("Other retrieved documents (excerpts):\n" + ("\n".join(others) if others else "(none)"))
    parts.append(_reminder(RELEVANCE if logprob else agent, cot))
    return "\n\n".join(parts)


def assessor_messages(example: Example, docs: Sequence[Doc], index: int, agent: str, cot: bool = False, logprob: bool = False) -> tuple[Message, ...]:
    return messages(system_prompt(agent, cot=cot, logprob=logprob), assessor_user(example, docs, index, agent, cot=cot, logprob=logprob))


# --------------------------------------------------------------------------- #
# Conflict Detector, one call per query (strategy.conflict=per_query, the default)
#
# Appendix N: the detector receives the question and "a list of claim summaries from
# each retrieved document with document IDs" and returns ``doc_adjustments`` for all
# of them. The summaries are the documents' excerpts (the same stand-in for another
# document's claims that the Consistency Verifier gets), labelled with their
# retrieval rank; the reply maps each number to an adjustment in -2..+2
# (:func:`madara_cli.agents.scoring.parse_doc_adjustments` reads it).
# --------------------------------------------------------------------------- #

DOC_ADJUSTMENTS = "doc_adjustments"

_TEAM_ALL = (
    "You are one of three reviewers who check retrieved documents before a question is answered "
    "(or before a claim is verified). You review all of the retrieved documents at once: each is shown "
    "as a short excerpt under its number."
)
_DETECTOR_ROLE = (
    "Your role: Conflict Detector. Look only for disagreement between the documents. Work out which answers "
    "they give, which documents contradict each other, whether one of them may be out of date or altered "
    "(for example a name, place or date swapped for another), and which answer most of them support. "
    "Then give every document an adjustment."
)
_DETECTOR_GUIDE = (
    "Adjustment guide, one per document:\n"
    "+2 = it supports the answer most documents give, and nothing newer contradicts it.\n"
    "+1 = it supports the answer most documents give.\n"
    " 0 = it takes no part in any disagreement (neutral, or silent about the answer).\n"
    "-1 = it contradicts the answer most documents give.\n"
    "-2 = it contradicts the answer most documents give and looks outdated or altered."
)
_DETECTOR_STEPS = (
    "Reason in five steps before deciding:\n"
    "1. List the answers the documents give.\n"
    "2. Find the documents that contradict each other.\n"
    "3. Note which of them may be outdated or altered.\n"
    "4. Decide which answer most documents support.\n"
    "5. Choose each document's adjustment from the guide."
)
_DETECTOR_FIELDS = (
    '"has_conflict": true or false, "majority_position": "the answer most documents support", '
    '"doc_adjustments": {"1": N, "2": N, ...}'
)
_DETECTOR_JSON = (
    "Respond with a single JSON object and nothing else: {" + _DETECTOR_FIELDS + "}. "
    "doc_adjustments has one entry for every document number, each N an integer from -2 to 2."
)
_DETECTOR_COT_JSON = (
    "Write your answer as a single JSON object and nothing else, with the fields in this order:\n"
    '{"reasoning_steps": ["step 1 ...", "step 2 ...", "step 3 ...", "step 4 ...", "step 5 ..."], "confidence": C, '
    + _DETECTOR_FIELDS + "}\n"
    "reasoning_steps holds one short sentence per step, five in total; confidence is an integer from 1 (guessing) "
    "to 5 (certain); doc_adjustments has one entry for every document number, each N an integer from -2 to 2."
)

DETECTOR_SYSTEM = _join(_TEAM_ALL, _DETECTOR_ROLE, _DETECTOR_GUIDE, _DETECTOR_JSON)
DETECTOR_COT_SYSTEM = _join(_TEAM_ALL, _DETECTOR_ROLE, _DETECTOR_GUIDE, _DETECTOR_STEPS, _DETECTOR_COT_JSON)


def detector_user(example: Example, docs: Sequence[Doc], cot: bool = False) -> str:
    """The per-query detector's user turn: the question, then every document's excerpt
    under its number, then a reminder of the reply format naming the numbers."""
    listing = "\n".join(f"[{j + 1}] {excerpt(d)}" for j, d in enumerate(docs)) or "(none)"
    ids = f"1 to {len(docs)}" if len(docs) > 1 else "1"
    head = "five reasoning_steps, then confidence (1 to 5), then " if cot else ""
    reminder = f"Reply with the JSON object only: {head}doc_adjustments for documents {ids}, each from -2 to 2."
    return "\n\n".join([_query_line(example), "Retrieved documents (excerpts):\n" + listing, reminder])


def detector_messages(example: Example, docs: Sequence[Doc], cot: bool = False) -> tuple[Message, ...]:
    return messages(DETECTOR_COT_SYSTEM if cot else DETECTOR_SYSTEM, detector_user(example, docs, cot=cot))


# --------------------------------------------------------------------------- #
# MAIN-RAG judge (Chang et al., ACL 2025): Yes/No on (document, question, answer)
# --------------------------------------------------------------------------- #

JUDGE_SYSTEM = (
    "You are a judge who checks retrieved evidence. You are given a document, a question (or a claim) and a "
    "candidate answer produced from that document. Decide whether the document provides information that "
    "supports answering the question with this answer. Reply with one word: Yes or No."
)


def judge_messages(example: Example, doc: Doc, answer: str) -> tuple[Message, ...]:
    if example.task == "fever":
        user = f"Document:\n{doc.render()}\n\nClaim: {example.question}\nCandidate verdict: {answer}\n\nDoes the document support this verdict? Yes or No?"
    else:
        user = f"Document:\n{doc.render()}\n\nQuestion: {example.question}\nCandidate answer: {answer}\n\nDoes the document support this answer? Yes or No?"
    return messages(JUDGE_SYSTEM, user)


# --------------------------------------------------------------------------- #
# RSC forced re-score (Appendix F.1, rsc.rescore=forced): the assessor is handed an
# analysis it did not write and must score from it, not from a fresh reading.
# --------------------------------------------------------------------------- #

# The authors' forced-reasoning prompt shows at most this much of the document: the
# score is meant to come from the analysis, so the document is context, not the source.
RESCORE_DOC_CHARS = 2000
RESCORE_BEGIN = "<<< PREVIOUS ANALYSIS >>>"
RESCORE_END = "<<< END OF PREVIOUS ANALYSIS >>>"

FORCED_RESCORE_SYSTEM = _join(
    "Your role: Relevance Assessor. The document below has already been analysed: the analysis is given to you "
    "between the markers " + RESCORE_BEGIN + " and " + RESCORE_END + ". Your only task is to turn that analysis "
    "into the final relevance score. Base the score on the analysis as written; do not analyse the document "
    "again and do not replace the analysis with your own judgement.",
    _RELEVANCE_GUIDE,
    'Respond with a single JSON object and nothing else: {"score": N, "confidence": C} where N is an integer '
    "from 0 to 5 and C an integer from 1 (guessing) to 5 (certain).",
)


def _analysis_block(steps: Sequence[str]) -> str:
    # A chain that quotes a marker must not close the block early: the markers are ours alone.
    lines = [" ".join(str(s).replace(RESCORE_BEGIN, "").replace(RESCORE_END, "").split()) for s in steps]
    return "\n".join(f"- {line}" for line in lines if line)


def forced_rescore_user(example: Example, doc: Doc, steps: Sequence[str]) -> str:
    """The forced re-score user turn: the question (or claim), the document cut to
    :data:`RESCORE_DOC_CHARS` characters, and the perturbed chain between the markers."""
    text = doc.render()
    if len(text) > RESCORE_DOC_CHARS:
        text = text[:RESCORE_DOC_CHARS] + " ..."
    return "\n\n".join(
        (
            _query_line(example),
            f"Document:\n{text}",
            f"{RESCORE_BEGIN}\n{_analysis_block(steps)}\n{RESCORE_END}",
            'Reply with the JSON object only: {"score": N, "confidence": C}, the score taken from the analysis above.',
        )
    )


def forced_rescore_messages(example: Example, doc: Doc, steps: Sequence[str]) -> tuple[Message, ...]:
    return messages(FORCED_RESCORE_SYSTEM, forced_rescore_user(example, doc, steps))
