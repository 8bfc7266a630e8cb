"""Generator prompts and the answer clean-up every strategy shares (the MADARA paper,
Appendix N: a factoid generator answering from the documents with a short phrase, a FEVER
generator giving one label; PDE and MAIN-RAG call the factoid one with a single document).

The words are a prompt set's (shipped: ``configs/prompts/madara/factoid_*.txt`` and
``fever_*.txt``). The shipped factoid system prompt is Appendix N's description and
nothing more -- nothing about disagreeing documents, which would aim the NF baseline,
where every routing decision starts, at CONFLICTS.
"""

from __future__ import annotations

import re
from typing import Sequence

from madara_cli.config.folders import shipped_prompt_set
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.core.metrics import tidy_answer
from madara_cli.core.records import ChatRequest, Doc, Example, Message, messages

STYLES = ("zeroshot", "oneshot")


def render_docs(docs: Sequence[Doc]) -> str:
    return "\n\n".join(f"[{i + 1}] {d.render()}" for i, d in enumerate(docs))


def generation_request(
    example: Example, docs: Sequence[Doc], max_tokens: int, temperature: float, seed: int, style: str = "zeroshot", prompts: PromptSet | None = None
) -> ChatRequest:
    """One generator call over ``docs`` (all for NF, the selection for filtering
    strategies, one for PDE); fields ``documents`` (``[n] document`` blocks), ``question``
    and ``claim``. ``style``: ``zeroshot`` (the paper's) or ``oneshot``, a worked example
    first as an earlier user/assistant turn (the set's ``*_oneshot_*``, through the same
    user template) about an invented entity, so it leaks no answer: tiny models
    (SmolLM2-135M) otherwise answer in sentences or echo the rules."""
    ps = shipped_prompt_set() if prompts is None else prompts
    task = "fever" if example.task == "fever" else "factoid"

    def turn(documents: str, question: str) -> str:
        return ps.render(f"{task}_user", documents=documents, question=question, claim=question)

    fields = {"documents": render_docs(docs), "question": example.question, "claim": example.question}
    system = ps.render(f"{task}_system", **fields)
    user = turn(fields["documents"], example.question)
    if style == "zeroshot":
        msgs = messages(system, user)
    elif style == "oneshot":
        shot = ps.render(f"{task}_oneshot_documents"), ps.render(f"{task}_oneshot_question"), ps.render(f"{task}_oneshot_answer")
        msgs = (Message("system", system), Message("user", turn(shot[0], shot[1])), Message("assistant", shot[2]), Message("user", user))
    else:
        raise ValueError(f"unknown generation.style '{style}'; valid: {', '.join(STYLES)}")
    return ChatRequest(messages=msgs, max_tokens=max_tokens, temperature=temperature, seed=seed)


# The FEVER label words, each read as SUPPORTS or REFUTES.
_LABEL_WORD = r"(supports?|supported|supporting|true|refutes?|refuted|refuting|false)"
# A label the reply commits to: the word right after a "Label:" / "Answer:" / "Verdict:"
# lead-in (markdown and quotes between them allowed).
_COMMITTED = re.compile(r"\b(?:final\s+)?(?:label|answer|verdict)(?:\s*:|\s+is\b:?)[\s*_`'\"(\[]*" + _LABEL_WORD + r"\b", re.IGNORECASE)
_ANY_LABEL = re.compile(r"\b" + _LABEL_WORD + r"\b", re.IGNORECASE)
_NEGATORS = {"not", "no", "never", "neither", "nor", "cannot", "without", "nothing", "none", "lacks", "fails"}
_CLAUSE_END = re.compile(r"[.!?;:\n]")


def _negated(text: str, start: int) -> bool:
    """Whether one of the three words before ``start``, in the same clause, negates it
    ("not supported", "does not support", "isn't true", "no evidence supporting")."""
    clause = _CLAUSE_END.split(text[:start])[-1]
    words = re.findall(r"[a-z']+", clause.lower())[-3:]
    return any(w in _NEGATORS or w.endswith("n't") for w in words)


def fever_label(text: str) -> str | None:
    """The label a FEVER reply commits to: the word after its first ``Label:`` /
    ``Answer:`` lead-in, else its last label word that no negation governs
    ("not supported ... REFUTES" is REFUTES; "neither supports nor refutes" is none).
    None when the reply names no label."""
    committed = _COMMITTED.search(text)
    if committed:
        word = committed.group(1)
    else:
        free = [m for m in _ANY_LABEL.finditer(text) if not _negated(text, m.start())]
        if not free:
            return None
        word = free[-1].group(1)
    word = word.lower()
    return "SUPPORTS" if word.startswith("support") or word == "true" else "REFUTES"


def clean_answer(text: str, task: str = "factoid", reading: str = "tidy") -> str:
    """Reduce a generation to the answer string, identically for every strategy. Factoid:
    :func:`~madara_cli.core.metrics.tidy_answer`, which every metric also applies to the
    gold aliases, so a verbatim-correct reply stays correct. FEVER: :func:`fever_label`,
    else the tidied text (scored wrong). ``reading="strip"`` (``reading.answers``, the
    authors' code): the reply stripped of surrounding whitespace, for both tasks."""
    if reading == "strip":
        return (text or "").strip()
    if task == "fever":
        label = fever_label(text)
        if label is not None:
            return label
    return tidy_answer(text)
