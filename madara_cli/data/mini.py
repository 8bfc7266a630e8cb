"""The mini benchmark: a small offline QA set the project generates itself.

Each question comes with 10 documents: supporting passages that state the gold
answer, passages that contradict it by entity substitution (the construction of
CONFLICTS / ConflictQA: the answer entity is swapped for another of the same type),
and distractors about other entities that share words with the question. Entities
are invented, so a model cannot answer from memory and must read. Generation is
deterministic in ``seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from madara_cli.core.records import Doc, Example

_SYL = ["ka", "lo", "mi", "ra", "ven", "dor", "sel", "tu", "bar", "nis", "quo", "fen", "gal", "ith", "mor", "pax", "zel", "ori", "da", "len"]
_OCCUPATIONS = ["architect", "botanist", "cartographer", "violinist", "surgeon", "astronomer", "sculptor", "chemist", "novelist", "lawyer", "pilot", "economist"]
_INSTRUMENTS = ["cello", "harp", "oboe", "trumpet", "piano", "flute", "accordion", "banjo"]


def _name(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(_SYL) for _ in range(parts)).capitalize()


def _person(rng: random.Random) -> str:
    return f"{_name(rng)} {_name(rng, 3)}"


@dataclass(frozen=True)
class _Relation:
    name: str
    question: Callable[[str], str]
    statements: tuple[Callable[[str, str], str], ...]  # (subject, answer) -> sentence
    subject: Callable[[random.Random], str]
    answer: Callable[[random.Random], str]


_RELATIONS = (
    _Relation("birthplace", lambda s: f"Where was {s} born?", (
        lambda s, a: f"{s} was born in {a} and spent a quiet childhood there before moving abroad.",
        lambda s, a: f"Records from the city archive of {a} list {s} among the children born there.",
        lambda s, a: f"Born in {a}, {s} later became known for work that drew on local traditions.",
    ), _person, lambda r: f"{_name(r)}burg" if r.random() < 0.5 else f"Port {_name(r)}"),
    _Relation("occupation", lambda s: f"What is {s}'s occupation?", (
        lambda s, a: f"{s} works as a {a} and has done so for more than twenty years.",
        lambda s, a: f"Colleagues describe {s} as a dedicated {a} with an unusual approach.",
        lambda s, a: f"Before retiring, {s} had a long career as a {a}.",
    ), _person, lambda r: r.choice(_OCCUPATIONS)),
    _Relation("capital", lambda s: f"What is the capital of {s}?", (
        lambda s, a: f"The capital of {s} is {a}, which is also its largest city.",
        lambda s, a: f"{a} has served as the capital of {s} since the old constitution was adopted.",
        lambda s, a: f"Government ministries of {s} are located in the capital, {a}.",
    ), lambda r: f"{_name(r, 3)}ia", lambda r: _name(r, 2) + r.choice(["ton", "grad", "ville", "mar"])),
    _Relation("founder", lambda s: f"Who founded {s}?", (
        lambda s, a: f"{s} was founded by {a}, who ran it for its first decade.",
        lambda s, a: f"{a} started {s} in a small workshop with two employees.",
        lambda s, a: f"The company history of {s} credits {a} as its founder.",
    ), lambda r: f"{_name(r)} {r.choice(['Industries', 'Works', 'Labs', 'Foundry'])}", _person),
    _Relation("year", lambda s: f"In what year was the {s} completed?", (
        lambda s, a: f"The {s} was completed in {a} after nine years of construction.",
        lambda s, a: f"Construction of the {s} finished in {a}, and it opened to traffic the same year.",
        lambda s, a: f"Engineers celebrated when the {s} was completed in {a}.",
    ), lambda r: f"{_name(r)} Bridge", lambda r: str(r.randint(1850, 2015))),
    _Relation("instrument", lambda s: f"What instrument does {s} play?", (
        lambda s, a: f"{s} plays the {a} in the city's chamber orchestra.",
        lambda s, a: f"Critics praised {s}'s performance on the {a} at the spring festival.",
        lambda s, a: f"{s} took up the {a} at the age of seven.",
    ), _person, lambda r: r.choice(_INSTRUMENTS)),
)


def generate(n_questions: int = 60, seed: int = 0, n_docs: int = 10) -> list[Example]:
    """``n_questions`` examples, each with ``n_docs`` documents: 2-3 supporting,
    0-3 contradicting (entity substitution), the rest distractors."""
    rng = random.Random(seed)
    facts = []
    for i in range(n_questions):
        rel = _RELATIONS[i % len(_RELATIONS)]
        facts.append((rel, rel.subject(rng), rel.answer(rng)))
    examples = []
    for i, (rel, subject, answer) in enumerate(facts):
        docs: list[tuple[str, str]] = []  # (role, text)
        n_support = rng.randint(2, 3)
        n_conflict = rng.choice([0, 1, 2, 2, 3])
        templates = list(rel.statements)
        rng.shuffle(templates)
        for t in range(n_support):
            docs.append(("supporting", templates[t % len(templates)](subject, answer)))
        for _ in range(n_conflict):
            wrong = rel.answer(rng)
            while wrong == answer:
                wrong = rel.answer(rng)
            docs.append(("conflicting", rng.choice(rel.statements)(subject, wrong)))
        while len(docs) < n_docs:
            # Distractors: a fact about another subject (often the same relation, so it
            # shares words with the question); with too few facts, a fresh one.
            orel, osub, oans = facts[rng.randrange(len(facts))]
            if osub == subject:
                orel = _RELATIONS[rng.randrange(len(_RELATIONS))]
                osub, oans = orel.subject(rng), orel.answer(rng)
            text = rng.choice(orel.statements)(osub, oans)
            if all(text != t for _, t in docs):  # a pool never holds the same passage twice
                docs.append(("distractor", text))
        rng.shuffle(docs)
        pool = tuple(Doc(id=f"mini-{i:03d}-d{j}", title="", text=text, meta={"role": role}) for j, (role, text) in enumerate(docs))
        examples.append(Example(id=f"mini-{i:03d}", question=rel.question(subject), answers=(answer,), docs=pool, task="factoid", meta={
            "relation": rel.name, "supporting": [d.id for d in pool if d.meta["role"] == "supporting"],
            "conflicting": [d.id for d in pool if d.meta["role"] == "conflicting"]}))
    return examples
