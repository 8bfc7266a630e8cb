"""``asqa``: ASQA (MAIN-RAG, ACL 2025), ambiguous factoid questions with disambiguated QA pairs."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register


def load_asqa(cfg: Node) -> list[Example]:
    """ASQA (``din0s/asqa``): the ambiguous question; answers = every short answer of
    its disambiguated QA pairs (``meta["qa_pairs"]`` keeps them per pair for
    MAIN-RAG's str-em, ``meta["long_answers"]`` the references)."""
    rows = read_checked(cfg, ("ambiguous_question", "qa_pairs"), "ASQA rows (sample_id, ambiguous_question, qa_pairs, annotations)")
    examples = []
    for n, row in enumerate(rows):
        pairs = [{"question": p.get("question", ""), "short_answers": list(aliases(p.get("short_answers")))} for p in row["qa_pairs"] or []]
        examples.append(Example(id=f"{cfg.name}-{row.get('sample_id', n)}", question=str(row["ambiguous_question"]).strip(),
                                answers=aliases([p["short_answers"] for p in pairs]),
                                meta={"qa_pairs": pairs, "long_answers": [a.get("long_answer", "") for a in row.get("annotations") or []]}))
    return examples


SPEC = register(LoaderSpec(name="asqa", load=load_asqa, description="ASQA: ambiguous factoid questions"))
