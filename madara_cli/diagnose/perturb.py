"""RSC: the perturbations of the probe's reasoning chains (the MADARA paper, *To Isolate or to
Score?*, Appendix F.1), at the three severities of :data:`madara_cli.diagnose.rsc.LEVELS`:
1. shuffled (sentences permuted: logic broken, content kept); 2. contradicted (quality words
and numbers negated); 3. random (another, random pair's chain).

Here: the chains (a CoT reply's ``reasoning_steps``, or its text without score fields), the
perturbations (pure, every draw seeded) and each perturbed chain's re-score request
(:func:`perturbed_rescore_request`, as ``rsc.rescore`` names). The statistics are in
:mod:`madara_cli.diagnose.rsc`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from madara_cli.agents.matrix import ragged
from madara_cli.agents.requests import forced_rescore_request, rescore_request
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.core.records import ChatRequest, Example, ScoreRequest

Reasoning = str | Sequence[str]
Seed = int | Sequence[int]
T = TypeVar("T")


# sentence-final punctuation (maybe a closing quote or bracket) and whitespace, or a line break ("4.5" has no whitespace)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\s*\n+\s*")
# a lone enumerator ("1.", "(2)", "a.", "Step 3:") joins the next sentence, so a shuffle keeps a step's number with its text
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


# a score field as a reply writes it: "score": 4, 'confidence': 3, score = 4/5, "adjustment": -1 ("/5" or "out of 5" optional)
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
    """A CoT reply's reasoning when it holds no ``reasoning_steps``: its text less every score,
    confidence and adjustment field and the JSON punctuation around them (else its own
    ``"score": N`` would survive perturbation and hand the re-score its answer); "" = none."""
    text = _SCORE_FIELD.sub(" ", _CODE_FENCE.sub(" ", reply or ""))
    text = _EMPTY_STRING.sub(" ", _JSON_PUNCTUATION.sub(" ", text))
    text = _LOOSE_COMMAS.sub(" ", text)
    text = "\n".join(" ".join(line.split()).strip(",;: ") for line in text.splitlines())
    text = re.sub(r"\n{2,}", "\n", text).strip()
    return text if re.search(r"[^\W\d_]", text) else ""


def split_sentences(reasoning: Reasoning) -> list[str]:
    """A chain's sentences (F.1: "split by sentence boundaries"): split after ``.``/``!``/``?``
    and whitespace and at line breaks, lone enumerators glued to the next sentence; a sequence
    (``reasoning_steps``) step by step. "e.g." does split: a finer shuffle, never a no-op."""
    if isinstance(reasoning, str):
        return _split_text(reasoning)
    return [sentence for step in reasoning if step and step.strip() for sentence in _split_text(step)]


def _as_written(reasoning: Reasoning) -> list[str]:
    """A chain's steps exactly as it holds them (a string is one step)."""
    return [reasoning] if isinstance(reasoning, str) else list(reasoning)


def steps_of(reasoning: Reasoning) -> list[str]:
    """A chain as the steps it is shown as: a string is one step, a sequence keeps its non-empty ones."""
    if isinstance(reasoning, str):
        return [reasoning.strip()] if reasoning.strip() else []
    return [s.strip() for s in reasoning if s and s.strip()]


def _join(sentences: Sequence[str], like: Reasoning) -> str:
    # Keep the original layout: prose stays prose, a list of steps stays one per line.
    return " ".join(sentences) if isinstance(like, str) else "\n".join(sentences)


def shuffled_sentences(reasoning: Reasoning, seed: Seed, may_repeat: bool = False, resplit: bool = True) -> list[str]:
    """Level 1 (Shuffled): the sentences of every step permuted by ``default_rng(seed)`` (F.1); a
    drawn identity (half the time with 2 sentences) is rotated by one instead, never a silent
    no-op (identical sentences still read the same). ``resplit=False`` permutes the steps as
    they are (already split by the authors' splitter, not again at a quote after a full stop)."""
    sentences = split_sentences(reasoning) if resplit else _as_written(reasoning)
    n = len(sentences)
    if n < 2:
        return sentences
    order = np.random.default_rng(seed).permutation(n)
    if np.array_equal(order, np.arange(n)) and not may_repeat:  # reading.shuffle=may_repeat keeps the identity, as the authors' code does
        order = np.roll(order, -1)
    return [sentences[i] for i in order]


def shuffle_reasoning(reasoning: Reasoning, seed: Seed) -> str:
    """Level 1 as text (:func:`shuffled_sentences`): prose stays prose, steps one sentence per line."""
    return _join(shuffled_sentences(reasoning, seed), reasoning)


_WORD_ANTONYMS: dict[str, str] = {
    "relevant": "irrelevant", "consistent": "inconsistent", "supports": "contradicts", "support": "contradict",
    "supported": "contradicted", "supporting": "contradicting", "accurate": "inaccurate", "reliable": "unreliable",
    "high quality": "low quality", "high-quality": "low-quality",
}
_ANTONYMS: dict[str, str] = {**_WORD_ANTONYMS, **{v: k for k, v in _WORD_ANTONYMS.items()}}
_NUMBER = r"(\d+(?:\.\d+)?)"
# one alternation, longest first: each span is rewritten once (no relevant -> irrelevant -> relevant)
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
    """Level 2 (Contradicted, F.1): whole-word, case-preserving swaps both ways (relevant,
    consistent, support(s/ed/ing)<->contradict(s/ed/ing), accurate, reliable, high/low quality)
    and 0-5 scores inverted ("score of 4" -> "score of 1", "N/5" -> "(5-N)/5"; other numbers
    stay), in one regex pass so nothing is swapped back."""
    if isinstance(reasoning, str):
        return contradict_text(reasoning)
    return _join([contradict_text(s) for s in split_sentences(reasoning)], reasoning)


# The authors' Level-2 swaps (reading.contradiction=authors) in their code's order: left to right only, as a
# case-sensitive substring (a word already negative gains a second prefix).
AUTHORS_SWAPS: tuple[tuple[str, str], ...] = (
    ("consistent", "inconsistent"), ("agrees", "disagrees"), ("supports", "contradicts"), ("relevant", "irrelevant"),
    ("accurate", "inaccurate"), ("reliable", "unreliable"), ("coherent", "incoherent"), ("aligned", "misaligned"),
    ("confirms", "refutes"), ("correct", "incorrect"), ("valid", "invalid"), ("helpful", "unhelpful"), ("useful", "useless"),
)


def contradict_text_authors(text: str) -> str:
    """Level 2 as the authors' code: each left word of :data:`AUTHORS_SWAPS`, anywhere (inside
    words too), becomes its right word; a swapped span is not seen by later pairs; numbers stay."""
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
    """A CoT reply's chain as the authors' probe reads it (``reading.chain_source=field``): the
    first ``{`` to last ``}`` decoded, its ``reasoning_steps`` else ``reasoning`` (a list of
    strings space-joined, anything else as Python writes it); neither, or no span, is empty; a
    span that does not decode, or steps holding numbers or objects, make the reply its own
    chain. Split after ``.``/``!``/``?`` and at line breaks, the steps taken as they are
    (:func:`perturb_chains` with ``resplit=False``)."""
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
    """Level 3 (Random, F.1): each (query j, doc i) of ``chains`` (maybe ragged; the result is
    shaped alike) gets the chain of (l, k) != (j, i), drawn uniformly and independently (two may
    share a donor; "another" is by position, so identical text may come back). ValueError under
    two pairs."""
    flat = [chain for row in chains for chain in row]
    n = len(flat)
    if n < 2:
        raise ValueError(f"random reasoning needs at least 2 (query, doc) pairs, got {n}")
    rng = np.random.default_rng(seed)
    # n-1 slots, skipping the pair's own index: uniform over the others
    donors = rng.integers(0, n - 1, size=n)
    donors = donors + (donors >= np.arange(n))
    return ragged([flat[d] for d in donors], map(len, chains))


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
    """All three levels for ``[query][doc]`` chains (F.1). Pair (j, i) shuffles with
    ``default_rng([seed, j, i])`` (fixed by seed and position alone) into sentences;
    contradicted chains keep their steps, cues negated; a random one is the donor's steps; an
    empty chain's versions are empty. ``reading``: ``contradiction="authors"`` swaps with
    :func:`contradict_text_authors`; ``shuffle="may_repeat"`` keeps an identity permutation;
    ``empty_chain="placeholder"`` lends an empty chain a donor too (re-scored, not dropped);
    ``resplit=False`` (chains from :func:`chain_from_field`) keeps each level's steps unsplit and
    untrimmed, as the authors' code does."""
    may_repeat = shuffle == "may_repeat"
    swap = contradict_text_authors if contradiction == "authors" else contradict_text
    steps = steps_of if resplit else _as_written
    shuffled = [[shuffled_sentences(c, (seed, j, i), may_repeat, resplit) for i, c in enumerate(row)] for j, row in enumerate(chains)]
    contradicted = [[[swap(step) for step in steps(c)] for c in row] for row in chains]
    # only chains with steps are given or lent (an empty one, excluded by the probe, is no donor)
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
    random = ragged([lent.get(n, []) for n in range(len(flat))], map(len, chains))
    return PerturbedChains(shuffled=shuffled, contradicted=contradicted, random=random)


def perturbed_rescore_request(
    pair: tuple[Example, int], normal: ChatRequest, steps: Sequence[str], confidence: int | None, mode: str, how: str, budget: int,
    prompts: PromptSet | None = None, shape: str = "madara",
) -> ChatRequest | ScoreRequest:
    """One perturbed chain's re-score request per ``rsc.rescore``: ``prefix``, the normal CoT
    request with the reply begun by the chain; ``forced`` (the authors'), a forced-reasoning
    request for document ``pair[1]`` of query ``pair[0]`` at the normal temperature and seed,
    worded by ``prompts`` (None = shipped) in the ``shape`` of ``reading.requests``."""
    if how == "prefix":
        return rescore_request(normal, steps, mode=mode, max_tokens=budget, confidence=confidence)
    ex, i = pair
    return forced_rescore_request(ex, (ex.docs or ())[i], steps, mode=mode, max_tokens=budget, temperature=normal.temperature, seed=normal.seed,
                                  prompts=prompts, shape=shape)
