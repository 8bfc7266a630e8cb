"""``retriever=bm25s`` (the default): Lucene-style BM25 (k1=0.9, b=0.4 as pyserini)
with the same tokenisation, stop words and Snowball stemmer at index and query time;
a corpus is indexed once into ``<results_dir>/indexes/`` (:mod:`madara_cli.retrievers.saved_index`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
from omegaconf import DictConfig

from madara_cli.config.schema import RetrieverConfig, input_field
from madara_cli.core.records import Doc
from madara_cli.plugins import register
from madara_cli.plugins.shape import num_range
from madara_cli.retrievers.saved_index import BM25sIndex, index_settings
from madara_cli.retrievers.spec import Ranked, RetrievalContext, RetrieverSpec, corpus_index_dir


@dataclass
class BM25sConfig(RetrieverConfig):
    """``retriever=bm25s``'s settings (Lucene/pyserini defaults)."""

    k1: float = 0.9
    b: float = 0.4
    stemmer: Optional[str] = "english"
    stopwords: Optional[str] = "en"
    index: Optional[str] = input_field("index")  # a saved index (madara index build); None = benchmark.corpus, indexed once


class BM25Index:
    """An in-memory bm25s index over ``docs``; ``search`` returns indices into ``docs``."""

    def __init__(self, docs: Sequence[Doc], k1: float = 0.9, b: float = 0.4, stemmer: str | None = "english", stopwords: str | None = "en", show_progress: bool = False):
        import bm25s

        self._bm25s = bm25s
        self.docs = list(docs)
        self._stemmer = None
        if stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(stemmer)
        self._stopwords = stopwords or []
        self.model = bm25s.BM25(k1=k1, b=b, method="lucene", idf_method="lucene")
        tokens = bm25s.tokenize([d.render() for d in self.docs], stopwords=self._stopwords, stemmer=self._stemmer, show_progress=show_progress)
        self.model.index(tokens, show_progress=show_progress)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.docs))
        q = self._bm25s.tokenize(list(queries), stopwords=self._stopwords, stemmer=self._stemmer, show_progress=False)
        # A query whose every token is unknown to the index scores every document 0;
        # bm25s then returns a fixed order, which is what a tie among zeros means.
        return self.model.retrieve(q, k=k, show_progress=False, n_threads=1)


class BM25sRetriever:
    def __init__(self, rcfg: DictConfig, ctx: RetrievalContext):
        self.rcfg, self.ctx = rcfg, ctx
        self._index: BM25sIndex | None = None

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        out = []
        for q, pool in zip(queries, pools, strict=False):
            if len(pool) <= 1:
                out.append([(d, 0.0) for d in pool])
                continue
            index = BM25Index(pool, k1=self.rcfg.k1, b=self.rcfg.b, stemmer=self.rcfg.stemmer, stopwords=self.rcfg.stopwords)
            ids, scores = index.search([q], len(pool))
            out.append([(pool[i], float(s)) for i, s in zip(ids[0], scores[0], strict=False)])
        return out

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        if self._index is None:
            self._index = BM25sIndex(corpus_index_dir(self.rcfg, self.ctx), index_settings(self.rcfg))
        return self._index.search(queries, k)


# Lucene's BM25 parameters: what every retriever built on bm25s' scoring accepts.
BM25_RANGES = {"k1": num_range(0.0), "b": num_range(0.0, 1.0)}

SPEC = register(RetrieverSpec(name="bm25s", schema=BM25sConfig, build=BM25sRetriever, ranges=BM25_RANGES,
                              description="BM25 (bm25s, Lucene's scoring and analysis): the default"))
