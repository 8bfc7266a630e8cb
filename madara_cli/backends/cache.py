"""Response cache and per-stage accounting.

Every request goes through :class:`CachedLLM`, keyed by the model fingerprint plus the
canonical request (messages, sampling parameters, seed), so work shared between
strategies is free (3-Agent, SDA, ATF and PDE read the same base scores; CoT and SDA+CoT
the same CoT scores), a killed run resumes where it stopped (each completion committed to
SQLite (WAL) as it finishes; per batch where the engine answers per batch, as vLLM), and a
rerun of a finished cell calls no backend at all.

Replies are stored as the engine wrote them; what a strategy receives has any reasoning
block removed (:func:`strip_thinking`), counted per stage as ``thinking_stripped`` cached
or not, so every parser reads the reply itself.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from madara_cli.backends.base import Backend
from madara_cli.backends.chat import strip_thinking
from madara_cli.config.identity import request_key
from madara_cli.core.errors import CacheError
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest

R = TypeVar("R", ChatRequest, ScoreRequest)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    completion TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def _encode(c: Completion) -> str:
    d = asdict(c)
    d.pop("cached")
    if d["logprobs"] is not None:  # JSON has no -inf
        d["logprobs"] = {k: (None if math.isinf(v) else v) for k, v in d["logprobs"].items()}
    return json.dumps(d, ensure_ascii=False)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# What each stored field must hold; a row with a field not listed (a newer madara's
# Completion) or a value of another type is one this madara cannot read.
_ROW_FIELDS: dict[str, Callable[[object], bool]] = {
    "text": lambda v: isinstance(v, str),
    "tokens_in": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "tokens_out": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "seconds": _number,
    "finish_reason": lambda v: isinstance(v, str),
    "logprobs": lambda v: v is None or (isinstance(v, dict) and all(isinstance(k, str) and (x is None or _number(x)) for k, x in v.items())),
    "truncated": lambda v: isinstance(v, bool),
}


def _decode(s: object) -> Completion | None:
    """The completion a stored row holds, or None for a row this madara cannot read (cut by a
    torn write or a damaged copy, or written by a newer madara with a field unknown here):
    a cache miss, whose request is sent again and its reply stored over the row."""
    from madara_cli.core.sidefiles import json_problem

    d, problem = json_problem(s) if isinstance(s, str) else (None, "not text")
    if problem is not None or not isinstance(d, dict) or "text" not in d:
        return None
    if any(k not in _ROW_FIELDS or not _ROW_FIELDS[k](v) for k, v in d.items()):
        return None
    if d.get("logprobs") is not None:
        d["logprobs"] = {k: (-math.inf if v is None else float(v)) for k, v in d["logprobs"].items()}
    return Completion(**d, cached=True)


def select_rows(db: sqlite3.Connection, keys: Sequence[str]) -> tuple[dict[str, Completion], int]:
    """(key -> completion of every readable row ``db`` holds for ``keys``, how many rows could not be read)."""
    found: dict[str, Completion] = {}
    bad = 0
    for i in range(0, len(keys), 500):
        chunk = list(keys[i : i + 500])
        for k, v in db.execute(f"SELECT key, completion FROM completions WHERE key IN ({','.join('?' * len(chunk))})", chunk).fetchall():
            c = _decode(v)
            if c is None:
                bad += 1
            else:
                found[k] = c
    return found, bad


def readable_row(s: object) -> int:
    """1 when a stored row is one this madara can read (SQLite's function for ``cache merge``)."""
    return int(_decode(s) is not None)


def warn_unreadable(path: Path, bad: int) -> None:
    import logging

    logging.getLogger(__name__).warning(
        "response cache %s: %d cached entr%s this madara cannot read (cut, or written by a newer madara); recomputed",
        path, bad, "y" if bad == 1 else "ies")


# Below this much free space an SQLite "disk I/O error" is taken for a full disk
# (SQLite reports ENOSPC on the WAL or journal that way, not as SQLITE_FULL).
_LOW_SPACE_BYTES = 16 << 20


def _free_bytes(folder: Path) -> int | None:
    import shutil

    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _cache_error(path: Path, e: sqlite3.Error) -> CacheError:
    """One line for an SQLite error on the cache. Only a file SQLite itself finds damaged is
    called damaged (with the ``mv`` that sets it aside): a full disk or failing write leaves
    a healthy cache, and moving it aside would throw work away."""
    text = " ".join(str(e).split())
    name = getattr(e, "sqlite_errorname", "") or ""
    folder = path.parent if str(path.parent) else Path(".")
    io_error = "disk I/O error" in text or name.startswith("SQLITE_IOERR")
    free = _free_bytes(folder) if io_error else None
    if name == "SQLITE_FULL" or "database or disk is full" in text or (io_error and free is not None and free < _LOW_SPACE_BYTES):
        return CacheError(f"no space left on {folder} for response cache {path} ({text}); free some space and rerun "
                          "(the cache is not damaged: finished cells and cached completions are kept)")
    if any(s in text for s in ("not a database", "malformed", "corrupt")) or name in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return CacheError(f"response cache {path} is damaged ({text}); move it aside and rerun: mv '{path}' '{path}.broken' "
                          "(finished cells are kept; only cached completions are recomputed)")
    if io_error:
        return CacheError(f"cannot read or write response cache {path}: {text} (the disk or file system failed a read or write; "
                          "the cache itself is not known to be damaged)")
    return CacheError(f"cannot use response cache {path}: {text} (set cache=PATH for another file)")


@contextmanager
def _guard(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as e:
        raise _cache_error(path, e) from None


class ResponseCache:
    """SQLite store of completions keyed by :func:`request_key`. Safe to share between
    processes (WAL journal, short transactions)."""

    def __init__(self, path: Path | str, wal: bool = True):
        from madara_cli.core.paths import writing

        self.path = Path(path)
        with writing(self.path.parent):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.unreadable = 0  # rows read that this madara could not decode (each a miss, recomputed)
        with _guard(self.path):
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            # WAL needs shared memory between the processes, so one machine: a shard on a
            # network file system (one writer) uses a rollback journal instead.
            self._db.execute(f"PRAGMA journal_mode={'WAL' if wal else 'DELETE'}")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            self._db.commit()

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        """The readable completions stored for ``keys``; a row this madara cannot read is
        left out (a miss) and counted in :attr:`unreadable`."""
        with self._lock, _guard(self.path):
            found, bad = select_rows(self._db, keys)
            self.unreadable += bad
        if bad:
            warn_unreadable(self.path, bad)
        return found

    def put_many(self, fingerprint: str, kind: str, items: Sequence[tuple[str, Completion]]) -> None:
        now = time.time()
        with self._lock, _guard(self.path):
            self._db.executemany("INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?)",
                                 [(k, fingerprint, kind, _encode(c), now) for k, c in items])
            self._db.commit()

    def seconds_per_call(self, fingerprint: str) -> dict[str, tuple[float, int]]:
        """Mean engine seconds of one completion of ``fingerprint`` by kind, with their count (``madara plan``'s rates)."""
        with self._lock, _guard(self.path):
            rows = self._db.execute(
                "SELECT kind, AVG(json_extract(completion, '$.seconds')), COUNT(*) FROM completions "
                "WHERE fingerprint = ? AND json_valid(completion) GROUP BY kind", (fingerprint,)
            ).fetchall()
        return {kind: (float(mean), int(n)) for kind, mean, n in rows if mean is not None}

    def timing_sums(self, fingerprint: str, kind: str | None = None) -> dict[str, float]:
        """Over the completions of ``fingerprint`` (of one ``kind``, when given) with ``seconds`` > 0:
        count ``n`` and sums of prompt tokens ``x``, output tokens ``z``, seconds ``y`` and their
        products (``xx``, ``zz``, ``xz``, ``xy``, ``zy``, ``yy``) in one pass: a least-squares fit
        of seconds on tokens (``madara plan``'s calibration)."""
        with self._lock, _guard(self.path):
            row = self._db.execute(
                "SELECT COUNT(*), SUM(x), SUM(z), SUM(y), SUM(x*x), SUM(z*z), SUM(x*z), SUM(x*y), SUM(z*y), SUM(y*y) FROM ("
                " SELECT CAST(json_extract(completion, '$.tokens_in') AS REAL) AS x,"
                " CAST(json_extract(completion, '$.tokens_out') AS REAL) AS z,"
                " CAST(json_extract(completion, '$.seconds') AS REAL) AS y"
                " FROM completions WHERE fingerprint = ? AND kind = coalesce(?, kind)) WHERE y > 0", (fingerprint, kind)
            ).fetchone()
        names = ("n", "x", "z", "y", "xx", "zz", "xz", "xy", "zy", "yy")
        return {k: float(v or 0.0) for k, v in zip(names, row)}

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class StageStats:
    """What one stage cost: requests asked, served from cache, sent to the engine.
    ``tokens_in``/``tokens_out``/``truncated`` count every request, cached or not (so a
    cell costs the same clean or resumed); ``issued_tokens_*`` and ``seconds`` only the
    work this run sent to the engine."""

    requests: int = 0
    cache_hits: int = 0
    calls_issued: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    issued_tokens_in: int = 0
    issued_tokens_out: int = 0
    seconds: float = 0.0
    truncated: int = 0
    # Replies that stopped at the request's max_tokens (finish reason "length"), cached
    # or not: a CoT chain cut before its score is a reply the strategy had to read anyway.
    cut_at_max_tokens: int = 0
    thinking_stripped: int = 0  # replies that still held a <think> block (removed before parsing)
    # Cached rows this madara could not read (cut, or a newer madara's format): each was
    # a miss, sent again and stored over the row.
    cache_unreadable: int = 0

    def count(self, c: Completion) -> None:
        """One completion the engine produced."""
        self.calls_issued += 1
        self.issued_tokens_in += c.tokens_in
        self.issued_tokens_out += c.tokens_out
        self.seconds += c.seconds

    def add(self, other: "StageStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class Accounting:
    """Per-cell accounting, by stage (see :class:`StageStats` for what counts cached
    replies and what counts engine work only)."""

    by_stage: dict[str, StageStats] = field(default_factory=dict)

    def stage(self, name: str) -> StageStats:
        return self.by_stage.setdefault(name, StageStats())

    def total(self) -> StageStats:
        t = StageStats()
        for s in self.by_stage.values():
            t.add(s)
        return t

    def to_dict(self) -> dict:
        t = asdict(self.total())
        t["seconds"] = round(t["seconds"], 3)
        t["by_stage"] = {k: {**asdict(v), "seconds": round(v.seconds, 3)} for k, v in self.by_stage.items()}
        return t


# Progress callback: (stage, done, total) -> None. The runner plugs rich in here.
ProgressFn = Callable[[str, int, int], None]


class CachedLLM:
    """The only door to a backend: batches in, completions out, through the cache."""

    def __init__(self, backend: Backend, cache: ResponseCache, progress: ProgressFn | None = None):
        self.backend = backend
        self.cache = cache
        self.progress = progress
        self.accounting = Accounting()
        self.samples: dict[str, tuple] | None = None  # digest -> (stage, kind, request, completion) while logging

    @contextmanager
    def logging_samples(self, on: bool = True) -> Iterator[dict[str, tuple]]:
        """Record every request made inside the block (``log_samples``), keyed by its cache digest."""
        saved, self.samples = self.samples, ({} if on else None)
        try:
            yield self.samples if self.samples is not None else {}
        finally:
            self.samples = saved

    @contextmanager
    def fresh_accounting(self, propagate: bool = False) -> Iterator[Accounting]:
        """Account the calls of one cell (or probe) apart (the backend is shared across cells);
        with ``propagate`` they also count in the enclosing accounting when the block ends (a
        probe inside a cell is part of its cost, and its own record still shows it alone)."""
        saved, self.accounting = self.accounting, Accounting()
        inner = self.accounting
        try:
            yield inner
        finally:
            self.accounting = saved
            if propagate:
                for name, stats in inner.by_stage.items():
                    saved.stage(name).add(stats)

    def chat(self, stage: str, requests: Sequence[ChatRequest]) -> list[Completion]:
        return self._run(stage, "chat", requests, self.backend.chat)

    def logprobs(self, stage: str, requests: Sequence[ScoreRequest]) -> list[Completion]:
        return self._run(stage, "score", requests, self.backend.next_token_logprobs)

    def _legacy_rows(self, fp: str, kind: str, keys: list[str], requests: Sequence[R], results: dict[str, Completion]) -> None:
        """What ``results`` lacks, from rows under the engine's former fingerprint
        (``legacy_fingerprint``: the cache_gguf_by_content shim), copied under today's key."""
        legacy = getattr(self.backend, "legacy_fingerprint", None)
        if not legacy or legacy == fp or len(results) == len(set(keys)):
            return
        old = {request_key(legacy, r): k for k, r in zip(keys, requests) if k not in results}
        found = self.cache.get_many(list(old))
        if found:
            moved = [(old[o], c) for o, c in found.items()]
            self.cache.put_many(fp, kind, moved)
            results.update(moved)

    def _run(self, stage: str, kind: str, requests: Sequence[R], call: Callable[[Sequence[R]], list[Completion]]) -> list[Completion]:
        stats = self.accounting.stage(stage)
        fp = self.backend.fingerprint
        keys = [request_key(fp, r) for r in requests]
        unreadable = getattr(self.cache, "unreadable", 0)
        results: dict[str, Completion] = self.cache.get_many(list(dict.fromkeys(keys)))
        self._legacy_rows(fp, kind, keys, requests, results)
        stats.cache_unreadable += getattr(self.cache, "unreadable", 0) - unreadable
        stats.requests += len(requests)
        stats.cache_hits += sum(1 for k in keys if k in results)
        # Identical requests inside one batch are sent once.
        pending: dict[str, R] = {}
        for k, r in zip(keys, requests):
            if k not in results and k not in pending:
                pending[k] = r
        total, done = len(pending), 0
        if self.progress and total:
            self.progress(stage, 0, total)
        items = list(pending.items())
        step = max(1, int(self.backend.batch_size))
        each = bool(getattr(self.backend, "reports_each", False))
        for i in range(0, len(items), step):
            chunk = items[i : i + step]
            stored: set[int] = set()

            def store(pairs: list[tuple[int, Completion]], chunk=chunk, stored=stored) -> None:
                # Stored and counted the moment it exists: Ctrl-C or a crash loses only the
                # requests still running, and progress moves per completion.
                nonlocal done
                self.cache.put_many(fp, kind, [(chunk[j][0], c) for j, c in pairs])
                for j, c in pairs:
                    stored.add(j)
                    results[chunk[j][0]] = c
                    stats.count(c)
                done += len(pairs)
                if self.progress:
                    self.progress(stage, done, total)

            def finished(j: int, c: Completion, stored=stored, store=store) -> None:
                if j not in stored:
                    store([(j, c)])

            batch = [r for _, r in chunk]
            out = call(batch, on_done=finished) if each else call(batch)
            if len(out) != len(chunk):
                raise RuntimeError(f"backend {self.backend.name} returned {len(out)} completions for {len(chunk)} requests")
            rest = [(j, c) for j, c in enumerate(out) if j not in stored]
            if rest:  # a backend that answers per batch (vLLM): one commit for the batch
                store(rest)
        for k in keys:
            c = results[k]
            stats.tokens_in += c.tokens_in
            stats.tokens_out += c.tokens_out
            stats.truncated += int(c.truncated)
        stats.cut_at_max_tokens += sum(1 for k in keys if results[k].finish_reason == "length")
        if kind == "chat":
            thought = set()
            for k, c in results.items():
                text, stripped = strip_thinking(c.text)
                if stripped:
                    results[k] = replace(c, text=text)
                    thought.add(k)
            stats.thinking_stripped += sum(1 for k in keys if k in thought)
        if self.samples is not None:
            for k, r in zip(keys, requests):
                self.samples.setdefault(k, (stage, kind, r, results[k]))
        return [results[k] for k in keys]
