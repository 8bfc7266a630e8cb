"""Retrievers: one module per retriever (bm25s, pyserini, dense, rerank), each registering
a :class:`~madara_cli.retrievers.spec.RetrieverSpec`; :func:`load_builtin` imports every
module of this package, so a new shipped retriever is one module plus one
``configs/retriever/<name>.yaml``. The orchestration (snapshots, the three kinds of query)
is :mod:`madara_cli.retrievers.retrieval`."""

from madara_cli.retrievers.spec import RETRIEVERS, RetrieverSpec, load_builtin, register_retriever, retriever_spec

__all__ = ["RETRIEVERS", "RetrieverSpec", "load_builtin", "register_retriever", "retriever_spec"]
