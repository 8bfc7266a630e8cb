"""Your own data: ``benchmark=jsonl benchmark.path=FILE``, one JSON object per line.

A row::

    {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"],
     "documents": [{"title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
                   "A bare string is a document without a title."]}

* ``question`` (a string) and ``answers`` (a string, or a list of strings: every
  gold alias) are required;
* ``id`` (a string or an integer) is optional: rows without one are numbered
  ``<benchmark.name>-00000``, ``-00001``, ... in file order;
* ``documents`` is optional: a list of strings or of ``{title, text}`` objects, the
  query's own pool (ranked by the retriever; ``benchmark.candidates=all`` keeps all of
  them). Without it the row's documents are retrieved from ``benchmark.corpus`` (a
  JSONL of ``id``/``title``/``text``), as for TriviaQA.

Other fields are ignored. Each row is checked as it is read: a line that is not JSON
(or nests too deep, holds too long an integer or a non-Unicode escape:
:mod:`madara_cli.core.sidefiles`), a row without ``question`` or ``answers``, or a field of
the wrong type stops the load in one line naming file and line. It is read with
:mod:`json`, not ``datasets``, whose column typing would reject ``answers`` that are a
string on one row and a list on the next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc, Example
from madara_cli.core.sidefiles import parse_line, text_lines
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.sources import WHAT, open_local
from madara_cli.plugins import register

ROW_SHAPE = 'question, answers (a string or a list of strings), optional id and documents (strings or {"title", "text"})'


def load_jsonl(cfg: Node) -> list[Example]:
    """The rows of ``benchmark.path`` as examples, in file order (see the module docstring)."""
    if not cfg.get("path"):
        raise DataError(f"benchmark {cfg.name} reads a local JSONL file: set benchmark.path=FILE (one object per line: {ROW_SHAPE})")
    path = Path(str(cfg.path)).expanduser()
    task = str(cfg.get("task") or "factoid")
    examples: list[Example] = []
    with open_local(path) as f:  # read once, UTF-8 checked as it goes
        for line_no, line in enumerate(text_lines(f, path, WHAT), 1):
            if not line.strip():
                continue
            row = parse_line(line, path, line_no)
            examples.append(_example(row, path, line_no, len(examples), str(cfg.name), task))
    if not examples:
        raise DataError(f"{path}: the file holds no rows (one JSON object per line: {ROW_SHAPE})")
    return examples


def _example(row: Any, path: Path, line_no: int, n: int, name: str, task: str) -> Example:
    def bad(what: str) -> DataError:
        return DataError(f"{path}:{line_no}: {what}")

    if not isinstance(row, dict):
        raise bad(f"a row must be a JSON object with {ROW_SHAPE}; got {_kind(row)}")
    missing = [k for k in ("question", "answers") if k not in row]
    if missing:
        raise bad(f"the row has no {' and no '.join(repr(k) for k in missing)} field; each row needs {ROW_SHAPE}")
    if not isinstance(row["question"], str):
        raise bad(f"'question' must be a string, not {_kind(row['question'])}")
    answers = row["answers"]
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise bad(f"'answers' must be a string or a list of strings, not {_kind(row['answers'])}")
    qid = row.get("id")
    if qid is None:
        qid = f"{name}-{n:05d}"
    elif isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
        raise bad(f"'id' must be a non-empty string or an integer, not {_kind(qid)}")
    qid = str(qid).strip()
    return Example(id=qid, question=row["question"].strip(), answers=tuple(dict.fromkeys(a.strip() for a in answers if a.strip())),
                   docs=_documents(row.get("documents"), qid, bad), task=task)


def _documents(value: Any, qid: str, bad) -> tuple[Doc, ...] | None:
    """The row's own documents; None (retrieve from ``benchmark.corpus``) when absent or empty."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad(f"'documents' must be a list of strings or of {{\"title\", \"text\"}} objects, not {_kind(value)}")
    docs = []
    for j, d in enumerate(value):
        if isinstance(d, str):
            title, text = "", d
        elif isinstance(d, dict):
            if not isinstance(d.get("text"), str):
                raise bad(f"document {j} needs a 'text' string" + (f", not {_kind(d['text'])}" if "text" in d else ""))
            if not isinstance(d.get("title", ""), (str, type(None))):
                raise bad(f"document {j}: 'title' must be a string, not {_kind(d['title'])}")
            title, text = d.get("title") or "", d["text"]
        else:
            raise bad(f"document {j} must be a string or a {{\"title\", \"text\"}} object, not {_kind(d)}")
        text = " ".join(text.split())
        if text:
            docs.append(Doc(id=f"{qid}-d{j:02d}", title=" ".join(title.split()), text=text))
    return tuple(docs) or None


def _kind(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number", type(None): "null"}
    return names.get(type(v), type(v).__name__)


SPEC = register(LoaderSpec(name="jsonl", load=load_jsonl, description="your own data: a local JSONL file (benchmark.path=FILE)"))
