"""``triviaqa``: TriviaQA, open-domain factoid questions over ``benchmark.corpus``."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register


def load_triviaqa(cfg: Node) -> list[Example]:
    """TriviaQA with every alias: HF ``mandarjoshi/trivia_qa`` (``answer.aliases``,
    ``normalized_aliases``, ``value``), the open-domain jsonl of the shared slice
    (``answers``) and FlashRAG (``golden_answers``). No passages: documents come
    from ``benchmark.corpus``."""
    rows = read_checked(cfg)
    examples = []
    for n, row in enumerate(rows):
        if not row.get("question"):
            raise DataError(f"benchmark {cfg.name}: row {n} has no question")
        ans = row.get("answer")
        if isinstance(ans, dict):
            answers = aliases(ans.get("value"), ans.get("aliases"), ans.get("normalized_value"), ans.get("normalized_aliases"))
        else:
            answers = aliases(row.get("answers"), row.get("golden_answers"), ans)
        key = row.get("question_id") if row.get("id") is None else row.get("id")
        examples.append(Example(id=f"{cfg.name}-{key if key is not None else n}", question=str(row["question"]).strip(), answers=answers))
    return examples


SPEC = register(LoaderSpec(name="triviaqa", load=load_triviaqa, description="TriviaQA: open-domain factoid questions"))
