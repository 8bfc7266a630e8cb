"""Generator prompts and the answer clean-up every strategy shares.

Written to the description in the paper's Appendix N: a factoid generator that
answers from the given documents with a short phrase, and a FEVER generator that
outputs one label. PDE and MAIN-RAG call the same factoid generator with a single
document.
"""

from __future__ import annotations

import re
from typing import Sequence

from madara_cli.records import ChatRequest, Doc, Example, Message, messages

FACTOID_SYSTEM = (
    "You answer questions using the documents you are given. "
    "Reply with the answer only: a short phrase of at most five words, usually a name, "
    "place, date or number. Do not explain and do not write a full sentence. "
    "If the documents disagree, give the answer that the most reliable evidence supports."
)

FEVER_SYSTEM = (
    "You check claims against the documents you are given. "
    "Reply with exactly one word: SUPPORTS if the documents show the claim is true, "
    "or REFUTES if they show it is false."
)


def render_docs(docs: Sequence[Doc]) -> str:
    return "\n\n".join(f"[{i + 1}] {d.render()}" for i, d in enumerate(docs))


def _user_turn(task: str, docs: Sequence[Doc], question: str) -> str:
    if task == "fever":
        return f"Documents:\n{render_docs(docs)}\n\nClaim: {question}\nLabel:"
    return f"Documents:\n{render_docs(docs)}\n\nQuestion: {question}\nAnswer:"


# ``generation.style=oneshot``: one worked example as an earlier user/assistant turn,
# about an invented entity of its own (so it leaks no answer), showing a bare-phrase
# reply. Tiny models (SmolLM2-135M) otherwise answer in sentences or echo the rules.
ONESHOT_FACTOID = (
    (
        Doc(id="oneshot-1", title="", text="Tessaly Ombrewick opened her first glass workshop in Harrowgate."),
        Doc(id="oneshot-2", title="", text="The Orlen Prize is awarded every spring to a young painter."),
    ),
    "Where did Tessaly Ombrewick open her first glass workshop?",
    "Harrowgate",
)
ONESHOT_FEVER = (
    (Doc(id="oneshot-1", title="", text="Tessaly Ombrewick opened her first glass workshop in Harrowgate."),),
    "Tessaly Ombrewick opened her first glass workshop in Lisbon.",
    "REFUTES",
)
STYLES = ("zeroshot", "oneshot")


def generation_request(example: Example, docs: Sequence[Doc], max_tokens: int, temperature: float, seed: int, style: str = "zeroshot") -> ChatRequest:
    """One generator call over ``docs`` (all of them for NF, the selection for
    filtering strategies, a single one for PDE). ``style`` is ``zeroshot`` (the
    paper's) or ``oneshot`` (:data:`ONESHOT_FACTOID` / :data:`ONESHOT_FEVER` first)."""
    system = FEVER_SYSTEM if example.task == "fever" else FACTOID_SYSTEM
    user = _user_turn(example.task, docs, example.question)
    if style == "zeroshot":
        msgs = messages(system, user)
    elif style == "oneshot":
        shot_docs, shot_q, shot_a = ONESHOT_FEVER if example.task == "fever" else ONESHOT_FACTOID
        msgs = (Message("system", system), Message("user", _user_turn(example.task, shot_docs, shot_q)), Message("assistant", shot_a), Message("user", user))
    else:
        raise ValueError(f"unknown generation.style '{style}'; valid: {', '.join(STYLES)}")
    return ChatRequest(messages=msgs, max_tokens=max_tokens, temperature=temperature, seed=seed)


_PREFIX = re.compile(r"^\s*(final answer|answer|the answer is|label|a)\s*[:\-]\s*", re.IGNORECASE)
_LEAD = re.compile(r"^\s*the answer is\s+", re.IGNORECASE)


def clean_answer(text: str, task: str = "factoid") -> str:
    """Reduce a generation to the answer string, identically for every strategy:

    1. keep the first non-empty line;
    2. drop a leading ``Answer:`` / ``The answer is`` / ``Label:``;
    3. strip surrounding quotes, brackets, markdown emphasis and a final period;
    4. FEVER: map to SUPPORTS / REFUTES by the first label word present
       (supports/true -> SUPPORTS, refutes/false -> REFUTES); otherwise keep the text
       (it then scores as wrong, and ``is_label`` reports it as unparseable).
    """
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    ans = lines[0] if lines else ""
    ans = _PREFIX.sub("", ans)
    ans = _LEAD.sub("", ans)
    previous = None
    while ans != previous:  # quotes, emphasis and a final period nest in any order
        previous = ans
        ans = ans.strip().strip("*_`\"'“”‘’[]()").rstrip(".").strip()
    if task == "fever":
        m = re.search(r"\b(supports?|supported|true|refutes?|refuted|false)\b", text, re.IGNORECASE)
        if m:
            word = m.group(1).lower()
            return "SUPPORTS" if word.startswith("support") or word == "true" else "REFUTES"
    return ans


def is_label(answer: str) -> bool:
    return answer in ("SUPPORTS", "REFUTES")
