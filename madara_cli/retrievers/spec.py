"""What every retriever shares: the :class:`Retriever` protocol, the context a
retrieval runs in, and the record each retriever module registers.

A retriever is one module (``madara_cli/retrievers/<name>.py``, found by
:func:`load_builtin`; an installed package's through the ``madara.retrievers`` entry
point group) plus one ``configs/retriever/<name>.yaml``. Its :class:`RetrieverSpec`
names its settings schema (a dataclass extending
:class:`~madara_cli.config.schema.RetrieverConfig`, enforced at compose) and how to
build it for a retrieval. The orchestration (snapshots, the three kinds of query) is
:mod:`madara_cli.retrievers.retrieval`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig

from madara_cli.config.plugin_schemas import register_schema
from madara_cli.retrievers.saved_index import check_index, ensure_index, index_settings
from madara_cli.errors import DataError
from madara_cli.records import Doc
from madara_cli.registry import Registry

Ranked = list[tuple[Doc, float]]


class Retriever(Protocol):
    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        """Every document of each pool, best first, with its score."""
        ...

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        """The top ``k`` corpus documents of each query, best first."""
        ...


@dataclass
class RetrievalContext:
    cfg: DictConfig  # the whole composed config
    llm: Any | None  # CachedLLM for the reranker
    indexes_dir: Path  # where corpus indexes are built and found
    corpus_path: Path | None  # benchmark.corpus
    corpus_sha: str | None
    built: list[Path] = field(default_factory=list)  # indexes this retrieval had to build

    @property
    def retriever(self) -> DictConfig:
        return self.cfg.retriever

    @property
    def has_corpus(self) -> bool:
        return bool(self.corpus_path or self.retriever.get("index"))


RetrieverFactory = Callable[[DictConfig, RetrievalContext], Retriever]


@dataclass(frozen=True)
class RetrieverSpec:
    """One retriever: its ``retriever.name``, settings schema and factory, and what the
    layers above need to know of it without naming it."""

    name: str
    schema: type  # dataclass of its settings, extending config.schema.RetrieverConfig
    build: RetrieverFactory  # (the retriever node, the context) -> Retriever
    # An LLM ranks (a generative reranker): the run hands it an engine, the cell's own or
    # the one of the model its `engine_model` setting names (when set).
    uses_engine: bool = False
    engine_model: str | None = None
    # Without an engine (madara plan), the retriever its `stand_in` setting names ranks instead.
    stand_in: str | None = None
    prompts: tuple[str, ...] = ()  # prompt families its requests use; cells' keys cover them
    own_corpus: bool = False  # it searches a corpus of its own (a prebuilt index) when the benchmark names none
    # What of the run besides its own node changes the documents (the reranker's model):
    # part of the snapshot's identity.
    identity: Callable[[DictConfig], dict[str, Any]] | None = None
    # A check of the composed config (one ConfigError line), run at compose time.
    check: Callable[[DictConfig], None] | None = None


def retriever_spec(name: str) -> RetrieverSpec | None:
    """The spec registered as ``name`` (after :func:`load_builtin`), or None."""
    load_builtin()
    return RETRIEVERS.find(name)


RETRIEVERS: Registry[RetrieverSpec] = Registry("retriever")


def register_retriever(spec: RetrieverSpec) -> RetrieverSpec:
    """Register ``spec`` and its schema; the same module registering again is a no-op."""
    old = RETRIEVERS.find(spec.name)
    if old is not None:
        if getattr(old.build, "__module__", None) == getattr(spec.build, "__module__", None):
            return old
        raise ValueError(f"retriever '{spec.name}' is already registered (by {old.build.__module__})")
    register_schema("retriever", spec.name, spec.schema)
    RETRIEVERS.register(spec.name)(spec)
    return spec


_LOADED = False


def load_builtin() -> None:
    """Import every module of this package, so each retriever registers its spec (the
    rule backends and strategies follow too: a shipped plug-in is a module of its package)."""
    global _LOADED
    if _LOADED:
        return
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):  # this package's folder
        importlib.import_module(f"madara_cli.retrievers.{mod.name}")
    _LOADED = True


def retriever_factory(name: str) -> RetrieverFactory:
    """The factory of registered retriever ``name``; DataError naming the registered ones."""
    load_builtin()
    try:
        return RETRIEVERS.get(name).build
    except KeyError as e:
        raise DataError(str(e.args[0])) from None


def no_corpus(ctx: RetrievalContext) -> DataError:
    b = ctx.cfg.benchmark.name
    return DataError(
        f"benchmark {b} ships no documents and no corpus is set: pass benchmark.corpus=FILE (JSONL id/title/text), "
        "retriever.index=DIR (madara index build), or retriever=pyserini"
    )


def corpus_index_dir(rcfg: DictConfig, ctx: RetrievalContext) -> Path:
    """``retriever.index`` (checked against the settings and benchmark.corpus), else
    the index of ``benchmark.corpus`` under ``<results_dir>/indexes``, built once."""
    settings = index_settings(rcfg)
    if rcfg.get("index"):
        d = Path(rcfg.index).expanduser()
        check_index(d, settings, ctx.corpus_sha)
        return d
    if ctx.corpus_path is None:
        raise no_corpus(ctx)
    path, built = ensure_index(ctx.corpus_path, ctx.indexes_dir, rcfg, progress=False)
    if built:
        ctx.built.append(path)
    return path
