"""Retrieval, the stage a cell runs: :func:`retrieve` reads each example's top-k documents
from the frozen snapshot, retrieving and appending only what is missing. What an example
ranks depends on what the benchmark ships: its own pool (MuSiQue, CONFLICTS, mini) is
ranked and cut to k (``benchmark.candidates=retrieved``) or kept whole in rank order
(``=all``, MuSiQue's default); with nothing (FEVER, TriviaQA, PopQA) the corpus is searched;
evidence that must stay (``meta["keep_docs"]``, ConflictQA) is kept whole, with the best
corpus documents as distractors up to k when a corpus is given, ranked over the union."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from madara_cli.config.identity import snapshot_identity, source_identity
from madara_cli.config.settings import Settings, to_plain
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc, Example
from madara_cli.plugins.catalog import CATALOG
from madara_cli.retrievers import snapshots
from madara_cli.retrievers.saved_index import INDEX_META, corpus_sha256, read_meta
from madara_cli.retrievers.spec import Ranked, RetrievalContext, Retriever

log = logging.getLogger("madara.retrieval")


def _query(ex: Example) -> str:
    return str(ex.meta.get("query") or ex.question)


def _scored(ranked: Ranked, name: str) -> tuple[Doc, ...]:
    return tuple(replace(d, meta={**d.meta, "score": round(s, 6), "retriever": name}) for d, s in ranked)


def retrieve_fresh(examples: Sequence[Example], retriever: Retriever, k: int, ctx: RetrievalContext) -> list[tuple[Doc, ...]]:
    """Retrieve for ``examples`` without any snapshot (the module docstring's three cases), batched per case."""
    name = str(ctx.retriever.name)
    out: dict[int, tuple[Doc, ...]] = {}
    pooled = [i for i, ex in enumerate(examples) if ex.docs and not (ex.meta.get("keep_docs") and ctx.has_corpus)]
    searched = [i for i, ex in enumerate(examples) if not ex.docs]
    mixed = [i for i, ex in enumerate(examples) if ex.docs and ex.meta.get("keep_docs") and ctx.has_corpus]
    # benchmark.candidates=all: the whole pool is assessed (MuSiQue's 20 paragraphs,
    # Section 6.5), still in the retriever's order so top-k strategies read its ranks.
    whole = str(ctx.cfg.benchmark.get("candidates") or "retrieved") == "all"
    if whole and searched:
        raise DataError(f"benchmark.candidates=all keeps each query's own documents, but {len(searched)} example(s) of "
                        f"{ctx.cfg.benchmark.name} ship none ({examples[searched[0]].id}); use benchmark.candidates=retrieved")
    if pooled:
        ranked = retriever.rank_pools([_query(examples[i]) for i in pooled], [examples[i].docs for i in pooled])
        for i, r in zip(pooled, ranked, strict=False):
            out[i] = _scored(r if whole else r[:k], name)
    spec = CATALOG.find("retriever", str(ctx.retriever.name))
    if searched and pooled and not ctx.has_corpus and not (spec is not None and spec.own_corpus):
        ids = [examples[i].id for i in searched]
        raise DataError(f"benchmark {ctx.cfg.benchmark.name}: {len(ids)} example(s) have no documents while the others ship theirs "
                        f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}); fix those rows, "
                        "or pass benchmark.corpus=FILE to retrieve for them")
    if searched:  # each retriever raises its own one-line error when it has no corpus
        ranked = retriever.search([_query(examples[i]) for i in searched], k)
        for i, r in zip(searched, ranked, strict=False):
            out[i] = _scored(r, name)
    if mixed:
        queries = [_query(examples[i]) for i in mixed]
        found = retriever.search(queries, k)
        unions = []
        for i, cands in zip(mixed, found, strict=False):
            own = list(examples[i].docs)
            ids = {d.id for d in own}
            unions.append(own + [d for d, _ in cands if d.id not in ids])
        ranked = retriever.rank_pools(queries, unions)
        for i, r in zip(mixed, ranked, strict=False):
            own_ids = {d.id for d in examples[i].docs}
            fill = set([d.id for d, _ in r if d.id not in own_ids][: max(0, k - len(own_ids))])
            out[i] = _scored([(d, s) for d, s in r if d.id in own_ids or d.id in fill], name)
    return [out[i] for i in range(len(examples))]


@dataclass
class RetrievalReport:
    """What one :func:`retrieve` call did (``Retrieved.report``)."""

    snapshot: str = ""
    reused: int = 0  # examples served from the snapshot
    retrieved: int = 0  # examples retrieved now and appended
    indexes_built: int = 0  # corpus indexes built for them (0 when an existing one served)


class Retrieved(list):
    """The examples :func:`retrieve` returns (a list), with the call's :class:`RetrievalReport`."""

    def __init__(self, examples: Iterable[Example] = (), report: RetrievalReport | None = None):
        super().__init__(examples)
        self.report = report if report is not None else RetrievalReport()


def _corpus_identity(cfg: Settings, ctx: RetrievalContext) -> dict[str, Any] | None:
    ident: dict[str, Any] = {}
    if ctx.corpus_sha:
        ident["sha256"] = ctx.corpus_sha
    index = cfg.retriever.get("index")
    if index:
        p = Path(str(index)).expanduser()
        if (p / INDEX_META).is_file():
            meta = read_meta(p)
            ident["index"] = {"corpus_sha256": meta.get("corpus_sha256"), "settings": meta.get("settings")}
        else:
            ident["index"] = str(index)  # a pyserini prebuilt name or Lucene folder
    return ident or None


def _context(cfg: Settings, llm: Any | None) -> RetrievalContext:
    corpus_path = Path(str(cfg.benchmark.corpus)).expanduser() if cfg.benchmark.get("corpus") else None
    return RetrievalContext(cfg=cfg, llm=llm, indexes_dir=_results_dir(cfg) / "indexes", corpus_path=corpus_path,
                            corpus_sha=corpus_sha256(corpus_path) if corpus_path else None)


def _results_dir(cfg: Settings) -> Path:
    return Path(str(cfg.get("results_dir") or "results"))


def snapshot_key(cfg: Settings, ctx: RetrievalContext | None = None) -> dict[str, Any]:
    """The identity of the snapshot a cell of ``cfg`` retrieves into: the benchmark's rows by content,
    the retriever's settings, the corpus by content, and the reranker's model and prompt."""
    ctx = ctx if ctx is not None else _context(cfg, None)
    spec = CATALOG.find("retriever", str(cfg.retriever.name))
    return snapshot_identity(
        benchmark=to_plain(cfg.benchmark),
        source=source_identity(cfg.benchmark),
        retriever=to_plain(cfg.retriever),
        corpus=_corpus_identity(cfg, ctx),
        reranker=spec.key(cfg) if spec is not None and spec.key is not None else None,
    )


def retrieve(examples: Sequence[Example], cfg: Settings, llm: Any | None = None) -> Retrieved:
    """Top-``cfg.retriever.k`` documents for each example (rank order in ``docs``), read from
    or appended to the frozen snapshot under ``<results_dir>/snapshots``; the list's
    ``report`` says how many came from it. ``llm`` (a ``CachedLLM``: ``retriever.model``'s
    engine, else the cell's) is needed only by ``retriever=rerank``, for examples not yet stored."""
    examples = list(examples)
    if not examples:
        return Retrieved()
    rcfg = cfg.retriever
    ctx = _context(cfg, llm)
    key = snapshot_key(cfg, ctx)
    reranker = key["reranker"]
    snap = snapshots.Snapshot(_results_dir(cfg) / "snapshots", key)
    stored = snap.load()
    docs: dict[str, tuple[Doc, ...]] = {}
    todo: dict[str, Example] = {}
    for ex in examples:
        hit = stored.get(ex.id)
        if hit is not None and hit[0] == snapshots.question_hash(ex):
            docs[ex.id] = hit[1]
        else:
            todo.setdefault(ex.id, ex)
    if todo:
        factory = CATALOG.get("retriever", str(rcfg.name)).build
        info: dict[str, Any] = {}
        if reranker and llm is not None:
            # One snapshot, one reranking engine: extending it with other weights than
            # those that started it would mix two rankings under one key.
            fp = getattr(getattr(llm, "backend", None), "fingerprint", None)
            seen = {i.get("reranker_fingerprint") for _, _, i in stored.values()} - {None}
            if fp and seen and seen != {fp}:
                raise DataError(f"{snap.path.name} was reranked by {sorted(seen)[0]}, not by the engine passed ({fp}); "
                                f"retriever.model={reranker['model']} must always name the same weights")
            info["reranker_fingerprint"] = fp
        pending = list(todo.values())
        fresh = retrieve_fresh(pending, factory(rcfg, ctx), int(rcfg.k), ctx)
        snap.append((ex, d, info) for ex, d in zip(pending, fresh, strict=False))
        docs.update((ex.id, d) for ex, d in zip(pending, fresh, strict=False))
    n_reused = sum(1 for ex in examples if ex.id not in todo)
    report = RetrievalReport(snapshot=str(snap.path), reused=n_reused, retrieved=len(todo), indexes_built=len(ctx.built))
    log.info("retrieval snapshot %s: %d reused, %d retrieved", snap.path.name, n_reused, len(todo))
    return Retrieved((replace(ex, docs=docs[ex.id]) for ex in examples), report)

