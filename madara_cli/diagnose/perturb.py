"""Reasoning-Score Coupling (RSC): the perturbations of the probe's reasoning chains.

Source: the MADARA paper (*To Isolate or to Score?*), Appendix F.1.

The probe scores every (query, document) pair once with chain-of-thought, then
rescores each pair with its reasoning replaced by a perturbed chain at three
increasing severities (the levels of :data:`madara_cli.diagnose.rsc.LEVELS`):

1. shuffled      -- the sentences of the chain permuted (logic broken, content kept);
2. contradicted  -- quality words and numbers negated (direction inverted);
3. random        -- the chain of another, random (query, document) pair.

Here: the chains (a CoT reply's ``reasoning_steps``, or its text without score
fields), the three perturbations (pure, every draw seeded) and the re-score request
each perturbed chain is sent in (:func:`perturbed_rescore_request`, in the reading
``rsc.rescore`` names). The statistics of the re-scored matrices are in
:mod:`madara_cli.diagnose.rsc`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from madara_cli.agents.requests import forced_rescore_request, rescore_request
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.core.records import ChatRequest, Example, ScoreRequest

Reasoning = str | Sequence[str]
Seed = int | Sequence[int]
T = TypeVar("T")


# A boundary is sentence-final punctuation (optionally followed by a closing quote or
# bracket) and whitespace, or a line break. Decimals such as "4.5" never match
# because no whitespace follows the point.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\s*\n+\s*")
# Fragments that are only an enumerator ("1.", "(2)", "a.", "Step 3:") belong to the
# sentence that follows them; splitting them off would let a shuffle separate a
# step's number from its text.
_ENUMERATOR = re.compile(r"^(?:\(?\d{1,2}[.)]|\(?[A-Za-z][.)]|step\s*\d+[.:)]?)$", re.IGNORECASE)


def _split_text(text: str) -> list[str]:
    pieces = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    sentences: list[str] = []
    pending = ""
    for piece in pieces:
        if _ENUMERATOR.match(piece):
            pending = f"{pending} {piece}".strip()
            continue
        sentences.append(f"{pending} {piece}".strip() if pending else piece)
        pending = ""
    if pending:
        sentences.append(pending)
    return sentences


# A score or confidence field as a reply writes it: "score": 4, 'confidence': 3,
# score = 4/5, "adjustment": -1 (quoted or not, an optional "/5" or "out of 5").
_SCORE_FIELD = re.compile(
    r"[\"']?\b(?:score|confidence|adjustment)\b[\"']?\s*[:=]\s*[\"']?[+-]?\d+(?:\.\d+)?[\"']?"
    r"(?:\s*(?:/|out\s+of)\s*\d+)?\s*,?",
    re.IGNORECASE,
)
_JSON_PUNCTUATION = re.compile(r"[{}\[\]]")
_CODE_FENCE = re.compile(r"```[A-Za-z]*")
_EMPTY_STRING = re.compile(r"(?:\"\s*\"|'\s*')")
_LOOSE_COMMAS = re.compile(r"(?:^|(?<=\s))[,;:]+(?=\s|$)")


def chain_from_text(reply: str) -> str:
    """The reasoning of a CoT reply that holds no ``reasoning_steps``: its text with
    every score, confidence and adjustment field removed, and the JSON punctuation
    left around them. Without this the reply's own ``"score": N`` would sit in the
    chain, survive shuffling and contradiction, and hand the re-score its answer.
    An empty string means there is no reasoning to perturb."""
    text = _SCORE_FIELD.sub(" ", _CODE_FENCE.sub(" ", reply or ""))
    text = _EMPTY_STRING.sub(" ", _JSON_PUNCTUATION.sub(" ", text))
    text = _LOOSE_COMMAS.sub(" ", text)
    text = "\n".join(" ".join(line.split()).strip(",;: ") for line in text.splitlines())
    text = re.sub(r"\n{2,}", "\n", text).strip()
    return text if re.search(r"[^\W\d_]", text) else ""


def split_sentences(reasoning: Reasoning) -> list[str]:
    """Split a reasoning chain into sentences (F.1: "split by sentence boundaries").

    A string is split after ``.``, ``!`` or ``?`` followed by whitespace, and at line
    breaks; lone enumerators ("1.", "Step 2:") are glued to the next sentence. A
    sequence of strings (the CoT prompt's ``reasoning_steps`` array) is split the same
    way step by step, so a step of two sentences gives two. Abbreviations such as
    "e.g." do split; that only makes a shuffle finer, never a no-op.
    """
    if isinstance(reasoning, str):
        return _split_text(reasoning)
    return [sentence for step in reasoning if step and step.strip() for sentence in _split_text(step)]


def _as_written(reasoning: Reasoning) -> list[str]:
    """A chain's steps exactly as it holds them (a string is one step)."""
    return [reasoning] if isinstance(reasoning, str) else list(reasoning)


def steps_of(reasoning: Reasoning) -> list[str]:
    """A chain as the list of steps it is shown as: a string is one step, a sequence
    keeps its non-empty steps."""
    if isinstance(reasoning, str):
        return [reasoning.strip()] if reasoning.strip() else []
    return [s.strip() for s in reasoning if s and s.strip()]


def _join(sentences: Sequence[str], like: Reasoning) -> str:
    # Keep the original layout: prose stays prose, a list of steps stays one per line.
    return " ".join(sentences) if isinstance(like, str) else "\n".join(sentences)


def shuffled_sentences(reasoning: Reasoning, seed: Seed, may_repeat: bool = False, resplit: bool = True) -> list[str]:
    """Level 1 (Shuffled) as a list: the chain's sentences permuted with a fixed seed.

    ``R' = permute(R)`` with ``numpy.random.default_rng(seed)`` over the sentences of
    every step (F.1). When the drawn permutation is the identity and there are at
    least two sentences, the chain is rotated by one instead, so the perturbation is
    never a silent no-op (with 2 sentences the identity is drawn half the time). A
    chain of identical sentences can still read the same after shuffling.
    ``resplit=False`` permutes the chain's steps as they are (chains the authors'
    splitter made already: a step is not split again at a quote or bracket after a
    full stop).
    """
    sentences = split_sentences(reasoning) if resplit else _as_written(reasoning)
    n = len(sentences)
    if n < 2:
        return sentences
    order = np.random.default_rng(seed).permutation(n)
    if np.array_equal(order, np.arange(n)) and not may_repeat:  # reading.shuffle=may_repeat keeps the identity, as the authors' code does
        order = np.roll(order, -1)
    return [sentences[i] for i in order]


def shuffle_reasoning(reasoning: Reasoning, seed: Seed) -> str:
    """Level 1 (Shuffled) as text (see :func:`shuffled_sentences`): prose stays prose,
    a list of steps becomes one sentence per line."""
    return _join(shuffled_sentences(reasoning, seed), reasoning)


_WORD_ANTONYMS: dict[str, str] = {
    "relevant": "irrelevant",
    "consistent": "inconsistent",
    "supports": "contradicts",
    "support": "contradict",
    "supported": "contradicted",
    "supporting": "contradicting",
    "accurate": "inaccurate",
    "reliable": "unreliable",
    "high quality": "low quality",
    "high-quality": "low-quality",
}
_ANTONYMS: dict[str, str] = {**_WORD_ANTONYMS, **{v: k for k, v in _WORD_ANTONYMS.items()}}
_NUMBER = r"(\d+(?:\.\d+)?)"
# One alternation, longest phrase first, so each span is rewritten exactly once: a
# swapped word is never looked at again (no relevant -> irrelevant -> relevant).
_CONTRADICT = re.compile(
    r"\b(?P<score>score\s+of\s+)" + _NUMBER + r"(?![\d.]\d)"
    r"|(?<![\w.])(?P<frac>" + _NUMBER[1:-1] + r")(?P<slash>\s*/\s*5)(?!\w|\.\d)"
    r"|\b(?P<word>" + "|".join(re.escape(w) for w in sorted(_ANTONYMS, key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def _match_case(source: str, replacement: str) -> str:
    if len(source) > 1 and source.isupper():
        return replacement.upper()
    if source[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def _invert_score(text: str, top: float = 5.0) -> str | None:
    # 5 - N on the 0-5 scale; a number outside the scale is not a score, leave it.
    value = float(text)
    if not 0.0 <= value <= top:
        return None
    inverted = top - value
    return str(int(inverted)) if inverted.is_integer() else f"{inverted:g}"


def _contradict_match(match: re.Match[str]) -> str:
    if match.group("score") is not None:
        inverted = _invert_score(match.group(2))
        return match.group(0) if inverted is None else match.group("score") + inverted
    if match.group("frac") is not None:
        inverted = _invert_score(match.group("frac"))
        return match.group(0) if inverted is None else inverted + match.group("slash")
    word = match.group("word")
    return _match_case(word, _ANTONYMS[word.lower()])


def contradict_text(text: str) -> str:
    """Antonym substitution on one string; see :func:`contradict_reasoning`."""
    return _CONTRADICT.sub(_contradict_match, text)


def contradict_reasoning(reasoning: Reasoning) -> str:
    """Level 2 (Contradicted): negate the chain's quality cues (F.1).

    Whole-word, case-preserving swaps in both directions: relevant<->irrelevant,
    consistent<->inconsistent, support(s/ed/ing)<->contradict(s/ed/ing),
    accurate<->inaccurate, reliable<->unreliable, "high quality"<->"low quality".
    Numeric quality cues are inverted on the 0-5 scale: "score of N" -> "score of
    5-N" (F.1's example: "score of 4" -> "score of 1") and "N/5" -> "(5-N)/5";
    numbers outside 0-5 are left alone. All substitutions happen in a single regex
    pass, so a swapped word is never swapped back.
    """
    if isinstance(reasoning, str):
        return contradict_text(reasoning)
    return _join([contradict_text(s) for s in split_sentences(reasoning)], reasoning)


# The authors' Level-2 word swaps (reading.contradiction=authors), in the order their
# code applies them: each left word becomes the right one, as a case-sensitive
# substring (so a word already negative gains a second prefix), never the other way.
AUTHORS_SWAPS: tuple[tuple[str, str], ...] = (
    ("consistent", "inconsistent"), ("agrees", "disagrees"), ("supports", "contradicts"), ("relevant", "irrelevant"),
    ("accurate", "inaccurate"), ("reliable", "unreliable"), ("coherent", "incoherent"), ("aligned", "misaligned"),
    ("confirms", "refutes"), ("correct", "incorrect"), ("valid", "invalid"), ("helpful", "unhelpful"), ("useful", "useless"),
)


def contradict_text_authors(text: str) -> str:
    """Level 2 as the authors' code perturbs a step: every occurrence of each left word
    of :data:`AUTHORS_SWAPS`, anywhere (inside words too, case-sensitive), becomes its
    right word; a swapped span is not looked at again by later pairs; numbers stay."""
    marks = []
    for n, (positive, _) in enumerate(AUTHORS_SWAPS):
        mark = f"\x00{n}\x00"  # a placeholder no later pair can match
        text = text.replace(positive, mark)
        marks.append(mark)
    for mark, (_, negative) in zip(marks, AUTHORS_SWAPS):
        text = text.replace(mark, negative)
    return text


_SENTENCES_AUTHORS = re.compile(r"(?<=[.!?])\s+|\n+")


def chain_from_field(reply: str) -> list[str]:
    """A CoT reply's chain as the authors' probe reads it (``reading.chain_source=field``):
    the span from the first ``{`` to the last ``}`` decoded; its ``reasoning_steps``,
    else its ``reasoning`` value (a list of strings joined with spaces, anything else
    as Python writes it); an object with neither, or a reply with no span, gives an
    empty chain, and a reply whose span does not decode, or whose steps are a list
    holding numbers or objects, is its own chain. The text is then split after
    ``.``/``!``/``?`` and at line breaks (whitespace kept inside each step): the steps
    the other levels then take as they are (:func:`perturb_chains` with ``resplit=False``)."""
    import json

    span = re.search(r"\{.*\}", reply or "", re.DOTALL)
    try:
        data = json.loads(span.group(0)) if span else {}
        value = (data.get("reasoning_steps") or data.get("reasoning") or "") if isinstance(data, dict) else reply
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            text = reply or ""  # steps written as numbers or objects cannot be joined as text: the whole reply
        else:
            text = " ".join(value) if isinstance(value, list) else str(value)  # Python's text of a value: True, 4.0, {'a': 1}
    except ValueError:
        text = reply or ""
    return [p for p in _SENTENCES_AUTHORS.split(text.strip()) if p]


def random_reasoning(chains: Sequence[Sequence[T]], seed: Seed) -> list[list[T]]:
    """Level 3 (Random): give every (query j, doc i) the chain of another pair (F.1).

    For each pair, (l, k) is drawn uniformly from all pairs with (l, k) != (j, i)
    (independently per pair, so two pairs may receive the same donor). ``chains``
    is indexed ``[query][doc]`` and may be ragged; the result has the same shape.
    "Another pair" is by position: if two pairs produced identical text, a pair may
    receive text equal to its own.

    Raises:
        ValueError: fewer than two pairs, so there is no other chain to draw.
    """
    flat = [chain for row in chains for chain in row]
    n = len(flat)
    if n < 2:
        raise ValueError(f"random reasoning needs at least 2 (query, doc) pairs, got {n}")
    rng = np.random.default_rng(seed)
    # Draw from n-1 slots and skip over the pair's own index: uniform over the others.
    donors = rng.integers(0, n - 1, size=n)
    donors = donors + (donors >= np.arange(n))
    out: list[list[T]] = []
    position = 0
    for row in chains:
        out.append([flat[donors[position + i]] for i in range(len(row))])
        position += len(row)
    return out


@dataclass(frozen=True)
class PerturbedChains:
    """The three perturbed versions of a probe's chains, each ``[query][doc] -> steps``
    (the list of strings the scoring prompt's ``reasoning_steps`` array is given)."""

    shuffled: list[list[list[str]]]
    contradicted: list[list[list[str]]]
    random: list[list[list[str]]]

    def by_level(self) -> tuple[list[list[list[str]]], list[list[list[str]]], list[list[list[str]]]]:
        return (self.shuffled, self.contradicted, self.random)


def perturb_chains(
    chains: Sequence[Sequence[Reasoning]], seed: int = 0, *, contradiction: str = "paper", shuffle: str = "changed", empty_chain: str = "drop",
    resplit: bool = True,
) -> PerturbedChains:
    """All three perturbation levels for chains indexed ``[query][doc]`` (F.1).

    The shuffle of pair (j, i) uses ``default_rng([seed, j, i])`` so each chain's
    permutation is fixed by the seed and its position alone, independent of how many
    chains come before it. Shuffled chains are lists of sentences; contradicted ones
    keep the chain's steps, each with its quality cues negated; a random chain is the
    donor pair's steps as they are. An empty chain's three versions are empty.

    The ``reading`` settings: ``contradiction="authors"`` swaps with
    :func:`contradict_text_authors`; ``shuffle="may_repeat"`` keeps an identity
    permutation; ``empty_chain="placeholder"`` gives an empty chain a donor at level 3
    too (it is re-scored, not dropped; donors are still chains with steps).
    ``resplit=False`` (chains read by :func:`chain_from_field`, already split by the
    authors' rule) keeps every level's steps as the chain holds them: shuffled as they
    are, contradicted and lent without being split or trimmed, as the authors' code does.
    """
    may_repeat = shuffle == "may_repeat"
    swap = contradict_text_authors if contradiction == "authors" else contradict_text
    steps = steps_of if resplit else _as_written
    shuffled = [[shuffled_sentences(c, (seed, j, i), may_repeat, resplit) for i, c in enumerate(row)] for j, row in enumerate(chains)]
    contradicted = [[[swap(step) for step in steps(c)] for c in row] for row in chains]
    # Only chains with steps are given or lent: an empty chain (excluded by the probe)
    # stays empty and is never another pair's donor. With no empty chain this is the
    # plain draw over all pairs.
    flat = [c for row in chains for c in row]
    usable = [n for n, c in enumerate(flat) if steps_of(c)]
    lent: dict[int, list[str]] = {}
    if empty_chain == "placeholder" and usable and len(flat) >= 2:
        # every pair, an empty one too, borrows a non-empty chain other than its own
        rng = np.random.default_rng(seed)
        for n in range(len(flat)):
            pool = [u for u in usable if u != n]
            if pool:
                lent[n] = steps(flat[pool[int(rng.integers(0, len(pool)))]])
    elif len(usable) >= 2:
        drawn = random_reasoning([[flat[n] for n in usable]], seed)[0]
        lent = {n: steps(c) for n, c in zip(usable, drawn)}
    elif len(flat) < 2:
        random_reasoning(chains, seed)  # raises: no other pair to draw from
    random, position = [], 0
    for row in chains:
        random.append([lent.get(position + i, []) for i in range(len(row))])
        position += len(row)
    return PerturbedChains(shuffled=shuffled, contradicted=contradicted, random=random)


def perturbed_rescore_request(
    pair: tuple[Example, int], normal: ChatRequest, steps: Sequence[str], confidence: int | None, mode: str, how: str, budget: int,
    prompts: PromptSet | None = None, shape: str = "madara",
) -> ChatRequest | ScoreRequest:
    """One perturbed chain's re-score request, in the reading ``rsc.rescore`` names:
    ``prefix``, the normal CoT request with the reply begun by the chain; ``forced`` (the
    authors' reading), a forced-reasoning request of its own for document ``pair[1]``
    of query ``pair[0]``, at the normal request's temperature and seed, worded by
    ``prompts`` (the cell's prompt set; None = the shipped one) in the request shape
    ``shape`` names (``reading.requests``)."""
    if how == "prefix":
        return rescore_request(normal, steps, mode=mode, max_tokens=budget, confidence=confidence)
    ex, i = pair
    return forced_rescore_request(
        ex, (ex.docs or ())[i], steps, mode=mode, max_tokens=budget, temperature=normal.temperature, seed=normal.seed, prompts=prompts,
        shape=shape,
    )
