"""``retriever=bm25s`` (the default): Lucene-style BM25 (k1=0.9, b=0.4 as pyserini)
with the same tokenisation, stop words and Snowball stemmer at index and query time;
a corpus is indexed once into ``<results_dir>/indexes/`` (:mod:`madara_cli.retrievers.saved_index`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from madara_cli.config.schema import RetrieverConfig, input_field
from madara_cli.config.settings import Node
from madara_cli.core.records import Doc
from madara_cli.plugins import register
from madara_cli.plugins.shape import num_range
from madara_cli.retrievers.saved_index import BM25sIndex, index_settings, load_stemmer
from madara_cli.retrievers.spec import Ranked, RetrievalContext, RetrieverSpec, corpus_index_dir


@dataclass
class BM25sConfig(RetrieverConfig):
    """``retriever=bm25s``'s settings (Lucene/pyserini defaults)."""

    k1: float = 0.9
    b: float = 0.4
    stemmer: Optional[str] = "english"
    stopwords: Optional[str] = "en"
    index: Optional[str] = input_field("index")  # a saved index (madara index build); None = benchmark.corpus, indexed once


class BM25sRetriever:
    def __init__(self, rcfg: Node, ctx: RetrievalContext):
        self.rcfg, self.ctx = rcfg, ctx
        self._index: BM25sIndex | None = None

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        """Each pool indexed in memory on its own, with the analysis a saved index uses."""
        import bm25s

        stemmer, stopwords = load_stemmer(self.rcfg.stemmer), self.rcfg.stopwords or []
        out = []
        for q, pool in zip(queries, pools, strict=False):
            if len(pool) <= 1:
                out.append([(d, 0.0) for d in pool])
                continue
            model = bm25s.BM25(k1=self.rcfg.k1, b=self.rcfg.b, method="lucene", idf_method="lucene")
            model.index(bm25s.tokenize([d.render() for d in pool], stopwords=stopwords, stemmer=stemmer, show_progress=False), show_progress=False)
            tokens = bm25s.tokenize([q], stopwords=stopwords, stemmer=stemmer, show_progress=False)
            # A query whose every token is unknown to the index scores every document 0;
            # bm25s then returns a fixed order, which is what a tie among zeros means.
            ids, scores = model.retrieve(tokens, k=len(pool), show_progress=False, n_threads=1)
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
