"""Retrieval: top-k documents per example.

``bm25s`` (default) is Lucene-style BM25 (k1=0.9, b=0.4 as pyserini) with the same
tokenisation, stop words and Snowball stemmer at index and query time. It ranks a
question's own document pool (CONFLICTS evidence, MuSiQue paragraphs, the mini
benchmark) or, when ``benchmark.corpus`` is set, a JSONL corpus.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
from omegaconf import DictConfig

from madara_cli.records import Doc, Example
from madara_cli.registry import Registry

RETRIEVERS: Registry = Registry("retriever")


class BM25Index:
    """A bm25s index over ``docs``; ``search`` returns indices into ``docs``."""

    def __init__(self, docs: Sequence[Doc], k1: float = 0.9, b: float = 0.4, stemmer: str | None = "english", stopwords: str | None = "en", show_progress: bool = False):
        import bm25s

        self._bm25s = bm25s
        self.docs = list(docs)
        self._stemmer = None
        if stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(stemmer)
        self._stopwords = stopwords
        self._progress = show_progress
        self.model = bm25s.BM25(k1=k1, b=b, method="lucene", idf_method="lucene")
        tokens = bm25s.tokenize([d.render() for d in self.docs], stopwords=stopwords, stemmer=self._stemmer, show_progress=show_progress)
        self.model.index(tokens, show_progress=show_progress)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.docs))
        q = self._bm25s.tokenize(list(queries), stopwords=self._stopwords, stemmer=self._stemmer, show_progress=False)
        # A query whose every token is unknown to the index comes back empty; bm25s
        # then ranks by index order, which is what a tie among zero scores means.
        ids, scores = self.model.retrieve(q, k=k, show_progress=False, n_threads=1)
        return ids, scores


def rank_pool(example: Example, k: int, cfg: DictConfig) -> tuple[Doc, ...]:
    """Rank an example's own documents by BM25 against its question."""
    pool = example.docs or ()
    if len(pool) <= 1:
        return tuple(pool)
    index = BM25Index(pool, k1=cfg.k1, b=cfg.b, stemmer=cfg.stemmer, stopwords=cfg.stopwords)
    ids, scores = index.search([example.question], k)
    return tuple(replace(pool[i], meta={**pool[i].meta, "bm25": float(s)}) for i, s in zip(ids[0], scores[0]))


@RETRIEVERS.register("bm25s")
def bm25s_retrieve(examples: Sequence[Example], cfg: DictConfig, corpus: Sequence[Doc] | None) -> list[Example]:
    k = int(cfg.k)
    if corpus is None:
        return [replace(ex, docs=rank_pool(ex, k, cfg)) for ex in examples]
    index = BM25Index(corpus, k1=cfg.k1, b=cfg.b, stemmer=cfg.stemmer, stopwords=cfg.stopwords, show_progress=len(corpus) > 50_000)
    ids, scores = index.search([ex.question for ex in examples], k)
    return [
        replace(ex, docs=tuple(replace(corpus[i], meta={**corpus[i].meta, "bm25": float(s)}) for i, s in zip(row_i, row_s)))
        for ex, row_i, row_s in zip(examples, ids, scores)
    ]


def load_corpus(path: str) -> list[Doc]:
    """A JSONL corpus: ``id`` plus ``title``/``text``, or FlashRAG's ``contents``
    (first line = quoted title, rest = text)."""
    import json
    from pathlib import Path

    from madara_cli.data.loaders import DataError

    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"corpus file not found: {p}")
    docs = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise DataError(f"{p}:{n + 1}: not valid JSON") from None
            if "contents" in row and "text" not in row:
                head, _, rest = row["contents"].partition("\n")
                row = {"id": row.get("id", n), "title": head.strip().strip('"'), "text": rest.strip()}
            docs.append(Doc(id=str(row.get("id", n)), title=row.get("title", "") or "", text=row.get("text", "") or ""))
    return docs


def retrieve(examples: Sequence[Example], cfg: DictConfig) -> list[Example]:
    """Top-``cfg.retriever.k`` documents for each example (rank order in ``docs``)."""
    corpus = load_corpus(cfg.benchmark.corpus) if cfg.benchmark.corpus else None
    fn = RETRIEVERS.get(cfg.retriever.name)
    return fn(examples, cfg.retriever, corpus)
