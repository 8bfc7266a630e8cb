"""``retriever=pyserini`` (extra ``.[pyserini]``): Lucene BM25 through Anserini, over the
paper's prebuilt Wikipedia index (``wikipedia-dpr-100w``) or a Lucene index of a corpus;
pools are ranked with bm25s' Lucene BM25 (docs/running.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc
from madara_cli.plugins import register
from madara_cli.retrievers import lucene
from madara_cli.retrievers.bm25s import BM25_RANGES, BM25sConfig, BM25sRetriever
from madara_cli.retrievers.saved_index import INDEX_META, check_index, index_settings, parse_corpus_row
from madara_cli.retrievers.spec import Ranked, RetrievalContext, RetrieverSpec, corpus_index_dir


@dataclass
class PyseriniConfig(BM25sConfig):
    """``retriever=pyserini``'s settings: bm25s' (pools are ranked with them), and ``index`` a prebuilt index name or a Lucene folder."""


def pyserini_searcher(index: str, k1: float, b: float):
    """A BM25(k1, b) LuceneSearcher over a prebuilt index name (``wikipedia-dpr-100w``), a madara
    ``lucene`` index or a Lucene folder; a missing extra or Java is one DataError line."""
    LuceneSearcher = lucene.start()
    folder = lucene.lucene_dir(index)
    try:
        searcher = LuceneSearcher(str(folder)) if folder else LuceneSearcher.from_prebuilt_index(index)
    except Exception as e:  # noqa: BLE001 - a download failure or a bad name
        raise DataError(f"cannot open pyserini index '{index}': {' '.join(str(e).split())[:200]}") from None
    if searcher is None:
        raise DataError(f"cannot open pyserini index '{index}' (unknown prebuilt index, or its download failed)")
    searcher.set_bm25(k1, b)
    return searcher


class PyseriniRetriever:
    def __init__(self, rcfg: Node, ctx: RetrievalContext):
        self.rcfg, self.ctx = rcfg, ctx
        self._searcher = None
        self._pools = BM25sRetriever(rcfg, ctx)  # the same Lucene BM25 formula, in process

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        return self._pools.rank_pools(queries, pools)

    def _index(self) -> str:
        index = self.rcfg.get("index")
        if self.ctx.corpus_path is not None:  # benchmark.corpus: its Lucene index, built once
            if index and lucene.lucene_dir(str(index)) is None:
                raise DataError("retriever=pyserini searches retriever.index, not benchmark.corpus; unset one of them (or use retriever=bm25s)")
            return str(corpus_index_dir(self.rcfg, self.ctx))
        if not index:
            raise DataError("retriever=pyserini needs retriever.index (a prebuilt index such as wikipedia-dpr-100w, or a Lucene folder)")
        if (Path(str(index)).expanduser() / INDEX_META).is_file():
            check_index(Path(str(index)).expanduser(), index_settings(self.rcfg))
        return str(index)

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        if self._searcher is None:
            self._searcher = pyserini_searcher(self._index(), float(self.rcfg.k1), float(self.rcfg.b))
        qids = [str(i) for i in range(len(queries))]
        hits = self._searcher.batch_search(list(queries), qids, k=k, threads=min(4, os.cpu_count() or 1))
        return [[(self._doc(h.docid), float(h.score)) for h in hits.get(qid, [])] for qid in qids]

    def _doc(self, docid: str) -> Doc:
        """A hit's stored document (its raw JSON row, else the raw text), under the hit's id."""
        raw = self._searcher.doc(docid).raw()
        try:
            return replace(parse_corpus_row(json.loads(raw), 0), id=str(docid))
        except ValueError:
            return Doc(id=str(docid), text=raw)


SPEC = register(RetrieverSpec(name="pyserini", schema=PyseriniConfig, build=PyseriniRetriever, own_corpus=True, ranges=BM25_RANGES,
                              extra="pyserini", description="Lucene BM25 through pyserini (the paper's Wikipedia index)"))
