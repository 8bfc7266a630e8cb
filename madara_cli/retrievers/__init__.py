"""The retrieval wing: the retrievers (one module each: bm25s, pyserini, dense, rerank,
each registering a :class:`~madara_cli.retrievers.spec.RetrieverSpec` in the one catalog)
and what they share: the frozen snapshots (:mod:`.snapshots`), saved indexes
(:mod:`.saved_index`, :mod:`.lucene`) and the retrieval stage a cell runs
(:mod:`.retrieval`). A new shipped retriever is one module plus one
``configs/retriever/<name>.yaml``."""

from madara_cli.retrievers.spec import RetrieverSpec

__all__ = ["RetrieverSpec"]
