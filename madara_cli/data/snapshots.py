"""Frozen retrieval snapshots: retrieve once, reuse for every strategy and model.

A snapshot is ``results/snapshots/<benchmark>__<retriever>-k<k>__<hash>.jsonl``,
one line per example (``{"id", "q", "docs"}``), plus ``<same>.meta.json`` holding
the full key the hash was taken over:

* the benchmark source (file sha256, or hub id + config + split) and every
  benchmark setting that shapes the examples (not ``sample``, ``calibration``,
  ``path``: the evaluated subset does not change what one example retrieves);
* the retriever's name and every retriever setting, ``k`` included;
* the corpus (file sha256 / saved index / pyserini index) and, for the generative
  reranker, the reranking model.

So a changed corpus or setting writes a new snapshot and never silently reuses an
old one, while any sample, seed, limit or calibration split of the same benchmark
reads the lines it needs and retrieves only the examples not yet stored (appended
under a file lock, safe for parallel workers). ``q`` is a hash of the question: a
stored line whose question differs is retrieved again, never reused.

Each line also holds ``h``, a sha256 of its own content (id, question hash, documents,
info), checked on every load: a line whose documents were edited stops the run with
one line naming the file, instead of feeding the edited text to every strategy.
``force=true`` re-runs cells on the same frozen snapshot (that is what frozen means);
moving the file aside rebuilds it by retrieving again. Lines written before ``h``
existed are trusted once: a hashed copy of each is appended on first load (the last
line of an id wins), and from then on they are checked like the rest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from madara_cli.config.schema import keyed
from madara_cli.data.sources import DataError
from madara_cli.paths import inside, writing
from madara_cli.records import Doc, Example

SNAPSHOT_FORMAT = 1
_BENCHMARK_NOT_SEMANTIC = ("sample", "calibration", "path", "corpus")


def question_hash(ex: Example) -> str:
    payload = json.dumps({"q": ex.question, "query": ex.meta.get("query"), "pool": [d.id for d in ex.docs or ()]}, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def snapshot_key(benchmark: dict[str, Any], source: str, retriever: dict[str, Any], corpus: dict[str, Any] | None, reranker: dict[str, Any] | None = None) -> dict[str, Any]:
    """The identity of a snapshot (see the module docstring)."""
    return {
        "format": SNAPSHOT_FORMAT,
        "benchmark": keyed("benchmark", {k: v for k, v in sorted(benchmark.items()) if k not in _BENCHMARK_NOT_SEMANTIC}),
        "source": source,
        "retriever": dict(sorted(retriever.items())),
        "corpus": corpus,
        "reranker": reranker,
    }


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


class SnapshotError(DataError):
    """A snapshot line that does not match its content hash (printed as one line)."""


def content_hash(row: dict[str, Any]) -> str:
    """sha256 of a line's content, ``h`` itself left out."""
    body = {k: row.get(k) for k in ("id", "q", "docs", "info")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _doc_to_json(d: Doc) -> dict[str, Any]:
    return {"id": d.id, "title": d.title, "text": d.text, "meta": d.meta}


def _doc_from_json(o: dict[str, Any]) -> Doc:
    return Doc(id=o["id"], text=o["text"], title=o.get("title", ""), meta=o.get("meta") or {})


class Snapshot:
    """One snapshot file; ``load`` reads it, ``append`` adds retrieved examples."""

    def __init__(self, root: str | Path, key: dict[str, Any]):
        self.key = key
        b, r = key["benchmark"].get("name", "benchmark"), key["retriever"]
        stem = f"{b}__{r.get('name', 'retriever')}-k{r.get('k', '')}__{key_digest(key)}"
        self.path = inside(root, Path(root) / f"{stem}.jsonl")
        self.meta_path = inside(root, Path(root) / f"{stem}.meta.json")

    def load(self) -> dict[str, tuple[str, tuple[Doc, ...], dict[str, Any]]]:
        """id -> (question hash, docs, info). A torn line (a killed writer) is ignored;
        a line that does not match its content hash raises :class:`SnapshotError`."""
        out: dict[str, tuple[str, tuple[Doc, ...], dict[str, Any]]] = {}
        if not self.path.is_file():
            return out
        unhashed: dict[Any, dict[str, Any]] = {}  # ids whose last line so far has no hash
        with self.path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    row = json.loads(raw.decode("utf-8"))
                    entry = (row["q"], tuple(_doc_from_json(d) for d in row["docs"]), row.get("info") or {})
                    hash(row["id"])
                except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
                    continue
                if "h" not in row:
                    unhashed[row["id"]] = row
                    out[row["id"]] = entry
                    continue
                unhashed.pop(row["id"], None)
                if row["h"] != content_hash(row):
                    raise SnapshotError(
                        f"retrieval snapshot {self.path} line {number} (example {row['id']!r}) does not match the content hash "
                        f"recorded when it was retrieved: its documents were changed after retrieval. force=true re-runs cells "
                        f"on the same snapshot; to rebuild it by retrieving again, move it aside and rerun: "
                        f"mv {self.path} {self.path}.edited"
                    )
                out[row["id"]] = entry
        if unhashed:  # written before lines carried a hash: record it now (see the module docstring)
            self._write_lines([self._line(r) for r in unhashed.values()])
        return out

    @staticmethod
    def _line(row: dict[str, Any]) -> str:
        row = {k: row.get(k) for k in ("id", "q", "docs", "info")}
        row["h"] = content_hash(row)
        return json.dumps(row, ensure_ascii=False) + "\n"

    def append(self, rows: Iterable[tuple[Example, Sequence[Doc], dict[str, Any]]]) -> int:
        lines = [
            self._line({"id": ex.id, "q": question_hash(ex), "docs": [_doc_to_json(d) for d in docs], "info": info})
            for ex, docs, info in rows
        ]
        if not lines:
            return 0
        self._write_lines(lines)
        return len(lines)

    def _write_lines(self, lines: list[str]) -> None:
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.meta_path.is_file():
                tmp = self.meta_path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(self.key, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
                tmp.replace(self.meta_path)
            with self.path.open("ab+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    end = f.seek(0, os.SEEK_END)
                    if end > 0:  # a killed writer's torn line must not swallow ours
                        f.seek(end - 1)
                        if f.read(1) != b"\n":
                            lines.insert(0, "\n")
                    f.write("".join(lines).encode("utf-8"))
                    f.flush()
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
