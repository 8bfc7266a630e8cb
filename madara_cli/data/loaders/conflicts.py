"""``conflicts``: CONFLICTS (Cattan et al. 2025, "DRAGged into Conflicts", github
google-research-datasets/rag_conflicts, 458 queries: the paper's count); GitHub only,
so it needs ``benchmark.path``."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc, Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register

CONFLICTS_TEXT_FIELDS = ("short_text", "snippet", "response_str")
CONFLICTS_MAX_WORDS = 400  # response_str can be a whole web page


def load_conflicts(cfg: Node) -> list[Example]:
    """CONFLICTS rows ``{question, correct_answer, conflict_type, source, search_results:
    [{title, url, snippet, date, response_str, short_text}]}`` (5-20 results): each result
    a document (``short_text``, else ``snippet``, else the first 400 words of
    ``response_str``; the date, which freshness conflicts turn on, in the title); the
    category in ``meta["conflict_type"]``. Most "Conflicting opinions" and "Complementary
    information" rows lack ``correct_answer`` and are dropped unless
    ``benchmark.require_answers=false``."""
    if not cfg.get("path"):
        raise DataError("benchmark conflicts (Cattan et al. 2025) is on GitHub, not the Hugging Face hub: download conflicts.jsonl "
                        "from https://github.com/google-research-datasets/rag_conflicts and pass benchmark.path=FILE")
    rows = read_checked(cfg, ("question", "search_results"), "CONFLICTS rows {question, correct_answer, conflict_type, search_results}")
    examples = []
    for i, row in enumerate(rows):
        qid = f"{cfg.name}-{i:04d}"
        docs = []
        for j, r in enumerate(row.get("search_results") or []):
            first = next((v for v in (" ".join(str(r.get(f) or "").split()) for f in CONFLICTS_TEXT_FIELDS) if v), "")
            text = " ".join(first.split(" ")[:CONFLICTS_MAX_WORDS]) if first else ""
            if not text:
                continue
            title = str(r.get("title") or "").strip()
            date = str(r.get("date") or "").strip()
            if date and date.lower() not in ("na", "n/a", "none", "null", "unknown"):
                title = f"{title} ({date})" if title else f"({date})"
            docs.append(Doc(id=f"{qid}-d{j:02d}", text=text, title=title, meta={"url": r.get("url") or "", "date": date}))
        examples.append(Example(id=qid, question=str(row["question"]).strip(), answers=aliases(row.get("correct_answer")), docs=tuple(docs),
                                task="factoid", meta={"conflict_type": row.get("conflict_type") or "", "source": row.get("source") or ""}))
    return examples


SPEC = register(LoaderSpec(name="conflicts", load=load_conflicts, description="CONFLICTS (Cattan et al. 2025): 458 queries with conflicting search results"))
