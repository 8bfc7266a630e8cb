"""``arc_challenge``: ARC-Challenge (MAIN-RAG, ACL 2025), grade-school science, multiple choice."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register


def load_arc(cfg: Node) -> list[Example]:
    """ARC-Challenge (``allenai/ai2_arc``): the question with its lettered choices;
    the gold answers are the answer key and the choice's text. Retrieval uses the
    bare question (``meta["query"]``)."""
    rows = read_checked(cfg, ("question", "choices", "answerKey"), "ARC rows (id, question, choices{text,label}, answerKey)")
    examples = []
    for n, row in enumerate(rows):
        choices = row["choices"] or {}
        labels, texts = list(choices.get("label") or []), list(choices.get("text") or [])
        key = str(row["answerKey"]).strip()
        options = "\n".join(f"{lab}: {txt}" for lab, txt in zip(labels, texts, strict=False))
        gold = texts[labels.index(key)] if key in labels else None
        examples.append(Example(id=f"{cfg.name}-{row.get('id', n)}", question=f"{str(row['question']).strip()}\n{options}", answers=aliases(key, gold),
                                meta={"query": str(row["question"]).strip(), "choices": dict(zip(labels, texts, strict=False))}))
    return examples


SPEC = register(LoaderSpec(name="arc_challenge", load=load_arc, description="ARC-Challenge: grade-school science, multiple choice"))
