"""``musique``: MuSiQue-Ans, multi-hop questions, each with its 20 own paragraphs."""

from __future__ import annotations

import re

from madara_cli.config.settings import Node
from madara_cli.core.records import Doc, Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register

_HOPS = re.compile(r"^(\d+)hop")


def load_musique(cfg: Node) -> list[Example]:
    """MuSiQue-Ans: each question with its 20 paragraphs as documents (``<qid>-p<idx>``),
    ``meta["supporting"]`` those marked ``is_supporting``, ``meta["hops"]`` from the id
    prefix (``2hop__``, ``3hop1__``, ``4hop3__`` -> 2, 3, 4); unanswerable ones (MuSiQue-Full)
    dropped. ``benchmark.candidates=all`` (the default here, Section 6.5's "20 mixed
    supporting/distractor paragraphs per query") keeps all 20, ``retrieved`` the top k."""
    rows = read_checked(cfg, ("id", "question", "paragraphs", "answer"), "MuSiQue rows (id, question, paragraphs, answer, answer_aliases)")
    examples = []
    for row in rows:
        if row.get("answerable") is False:
            continue
        qid = str(row["id"])
        docs = tuple(Doc(id=f"{qid}-p{p.get('idx', j)}", title=str(p.get("title") or ""), text=" ".join(str(p.get("paragraph_text") or "").split()),
                         meta={"is_supporting": bool(p.get("is_supporting"))}) for j, p in enumerate(row["paragraphs"]))
        m = _HOPS.match(qid)
        examples.append(Example(id=qid, question=str(row["question"]).strip(), answers=aliases(row.get("answer"), row.get("answer_aliases")),
                                docs=docs, meta={"supporting": [d.id for d in docs if d.meta["is_supporting"]], "hops": int(m.group(1)) if m else None}))
    return examples


SPEC = register(LoaderSpec(name="musique", load=load_musique, description="MuSiQue: multi-hop questions over 20 paragraphs"))
