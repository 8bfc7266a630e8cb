"""Per-worker cache shards for cluster launchers (SQLite's WAL cannot be shared across
nodes on a network file system): a ``submitit`` or ``ray`` job writes its own shard
``<cache>-shards/<host>-<pid>.sqlite`` and reads the main cache read-only, and
:func:`merge_shards` folds the shards back (docs/running.md)."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from madara_cli.backends.cache import ResponseCache, readable_row, select_rows, warn_unreadable
from madara_cli.core.records import Completion


def shard_dir(cache_path: str | Path) -> Path:
    """Where the shards of ``cache_path`` live (kept by ``make clean``, as the cache)."""
    p = Path(cache_path)
    return p.with_name(p.name + "-shards")


def checkpoint(cache_path: str | Path) -> None:
    """Move the WAL's pages into the database file, so workers opening it immutable see every entry."""
    p = Path(cache_path)
    if not p.is_file():
        return
    db = sqlite3.connect(p, timeout=60)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


class ShardedCache:
    """The cache a cluster job uses: its own shard for writes; reads from the shard,
    then from the main cache opened read-only (nothing writes it during a sweep)."""

    def __init__(self, cache_path: str | Path, worker: str | None = None):
        self.base_path = Path(cache_path)
        name = worker or f"{socket.gethostname()}-{os.getpid()}"
        self.path = shard_dir(self.base_path) / f"{name}.sqlite"
        self.shard = ResponseCache(self.path, wal=False)
        self._lock = threading.Lock()
        self._base: sqlite3.Connection | None = None
        self._base_unreadable = 0
        if self.base_path.is_file():
            uri = f"{self.base_path.resolve().as_uri()}?mode=ro&immutable=1"
            self._base = sqlite3.connect(uri, uri=True, check_same_thread=False)

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        found = self.shard.get_many(keys)
        missing = [k for k in keys if k not in found]
        if self._base is None or not missing:
            return found
        with self._lock:
            readable, bad = select_rows(self._base, missing)
            found.update(readable)
            self._base_unreadable += bad
        if bad:
            warn_unreadable(self.base_path, bad)
        return found

    @property
    def unreadable(self) -> int:
        """Rows read (shard or main cache) that this madara could not decode: each a miss."""
        return self.shard.unreadable + self._base_unreadable

    def put_many(self, fingerprint: str, kind: str, items: Sequence[tuple[str, Completion]]) -> None:
        self.shard.put_many(fingerprint, kind, items)

    def __len__(self) -> int:
        n = len(self.shard)
        if self._base is not None:
            with self._lock:
                n += self._base.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
        return n

    def close(self) -> None:
        self.shard.close()
        if self._base is not None:
            with self._lock:
                self._base.close()
            self._base = None


@dataclass
class MergeReport:
    cache: Path
    shards: int = 0
    rows: int = 0  # entries read from the shards
    added: int = 0  # of which new to the cache
    failed: list[str] = field(default_factory=list)  # "shard: reason"; such shards are kept
    # Rows this madara cannot read (cut, or a newer madara's format): never copied into the
    # cache, where every rerun would meet them; their shards are kept for a newer madara.
    skipped: int = 0
    kept: list[str] = field(default_factory=list)  # shards kept for their skipped rows


def merge_shards(cache_path: str | Path, keep: bool = False) -> MergeReport:
    """Fold every shard of ``cache_path`` into it (run it when no job writes shards); a shard is
    deleted (unless ``keep``) only once each of its keys is in the cache, where an entry stays as it is."""
    cache_path = Path(cache_path)
    report = MergeReport(cache_path)
    folder = shard_dir(cache_path)
    shards = sorted(folder.glob("*.sqlite")) if folder.is_dir() else []
    if not shards:
        return report
    ResponseCache(cache_path).close()  # creates the cache and its table if absent
    db = sqlite3.connect(cache_path, timeout=60)
    db.create_function("madara_readable", 1, readable_row, deterministic=True)
    try:
        for shard in shards:
            try:
                db.execute("ATTACH DATABASE ? AS shard", (str(shard),))
            except sqlite3.Error as e:
                report.failed.append(f"{shard.name}: {e}")
                continue
            try:
                with db:
                    before = db.execute("SELECT COUNT(*) FROM main.completions").fetchone()[0]
                    rows = db.execute("SELECT COUNT(*) FROM shard.completions").fetchone()[0]
                    skipped = db.execute("SELECT COUNT(*) FROM shard.completions WHERE NOT madara_readable(completion)").fetchone()[0]
                    db.execute("INSERT OR IGNORE INTO main.completions SELECT key, fingerprint, kind, completion, created "
                               "FROM shard.completions WHERE madara_readable(completion)")
                    after = db.execute("SELECT COUNT(*) FROM main.completions").fetchone()[0]
                lost = db.execute(
                    "SELECT COUNT(*) FROM shard.completions s WHERE madara_readable(s.completion) "
                    "AND NOT EXISTS (SELECT 1 FROM main.completions m WHERE m.key = s.key)"
                ).fetchone()[0]
            except sqlite3.Error as e:
                report.failed.append(f"{shard.name}: {e}")
                continue
            finally:
                db.execute("DETACH DATABASE shard")
            if lost:
                report.failed.append(f"{shard.name}: {lost} entries did not reach the cache")
                continue
            report.shards += 1
            report.rows += rows - skipped
            report.added += after - before
            report.skipped += skipped
            if skipped:
                report.kept.append(shard.name)
            if not keep and not skipped:
                for p in (shard, shard.with_name(shard.name + "-journal")):
                    p.unlink(missing_ok=True)
    finally:
        db.close()
    if not keep and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return report
