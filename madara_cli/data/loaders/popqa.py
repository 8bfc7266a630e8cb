"""``popqa``: PopQA (MAIN-RAG, ACL 2025), long-tail entity questions over ``benchmark.corpus``."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register


def load_popqa(cfg: Node) -> list[Example]:
    """PopQA (``akariasai/PopQA``): ``question`` and ``possible_answers`` (a JSON
    string on the hub); subject popularity and relation in meta."""
    rows = read_checked(cfg, ("question", "possible_answers"), "PopQA rows (id, question, possible_answers, s_pop, prop)")
    return [Example(id=f"{cfg.name}-{row.get('id', n)}", question=str(row["question"]).strip(), answers=aliases(row["possible_answers"]),
                    meta={"s_pop": row.get("s_pop"), "prop": row.get("prop")}) for n, row in enumerate(rows)]


SPEC = register(LoaderSpec(name="popqa", load=load_popqa, description="PopQA: long-tail entity questions"))
