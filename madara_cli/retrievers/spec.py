"""What every retriever shares: the :class:`Retriever` protocol, the context a retrieval runs
in, and the :class:`RetrieverSpec` each retriever module registers (docs/extending.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from madara_cli.config.settings import Node, Settings
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc
from madara_cli.plugins.shape import Spec
from madara_cli.retrievers.saved_index import check_index, ensure_index, index_settings

Ranked = list[tuple[Doc, float]]


class Retriever(Protocol):
    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        """Every document of each pool, best first, with its score."""

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        """The top ``k`` corpus documents of each query, best first."""


@dataclass
class RetrievalContext:
    cfg: Settings  # the whole composed config
    llm: Any | None  # CachedLLM for the reranker
    indexes_dir: Path  # where corpus indexes are built and found
    corpus_path: Path | None  # benchmark.corpus
    corpus_sha: str | None
    built: list[Path] = field(default_factory=list)  # indexes this retrieval had to build

    @property
    def retriever(self) -> Settings:
        return self.cfg.retriever

    @property
    def has_corpus(self) -> bool:
        return bool(self.corpus_path or self.retriever.get("index"))


RetrieverFactory = Callable[[Node, RetrievalContext], Retriever]


@dataclass(frozen=True, kw_only=True)
class RetrieverSpec(Spec):
    """One retriever: what every plug-in declares (:class:`~madara_cli.plugins.shape.Spec`)
    plus its factory and what the layers above need to know of it without naming it."""

    kind: ClassVar[str] = "retriever"

    build: RetrieverFactory  # (the retriever node, the context) -> Retriever
    # An LLM ranks (a generative reranker): the run hands it an engine, the cell's own or
    # the one of the model its `engine_model` setting names (when set).
    uses_engine: bool = False
    engine_model: str | None = None
    # Without an engine (madara plan), the retriever its `stand_in` setting names ranks instead.
    stand_in: str | None = None
    own_corpus: bool = False  # it searches a corpus of its own (a prebuilt index) when the benchmark names none


def corpus_index_dir(rcfg: Node, ctx: RetrievalContext) -> Path:
    """``retriever.index`` (checked against the settings and benchmark.corpus), else
    the index of ``benchmark.corpus`` under ``<results_dir>/indexes``, built once."""
    settings = index_settings(rcfg)
    if rcfg.get("index"):
        d = Path(rcfg.index).expanduser()
        check_index(d, settings, ctx.corpus_sha)
        return d
    if ctx.corpus_path is None:
        raise DataError(f"benchmark {ctx.cfg.benchmark.name} ships no documents and no corpus is set: pass benchmark.corpus=FILE "
                        "(JSONL id/title/text), retriever.index=DIR (madara index build), or retriever=pyserini")
    path, built = ensure_index(ctx.corpus_path, ctx.indexes_dir, rcfg, progress=False)
    if built:
        ctx.built.append(path)
    return path
