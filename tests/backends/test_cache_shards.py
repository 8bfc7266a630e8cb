"""Per-worker cache shards (cluster launchers) and `madara cache merge`."""

from __future__ import annotations

import math
import multiprocessing as mp
import sqlite3

from madara_cli.backends.cache import ResponseCache
from madara_cli.backends.shards import ShardedCache, checkpoint, merge_shards, shard_dir
from madara_cli.core.records import Completion
from tests.fakes import cli


def c(text: str, **kw) -> Completion:
    return Completion(text=text, tokens_in=3, tokens_out=1, **kw)


def rows(path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT key, completion FROM completions").fetchall())
    finally:
        db.close()


def _worker(cache_path: str, name: str, n: int) -> None:
    s = ShardedCache(cache_path, worker=name)
    for i in range(n):  # one commit per batch, as CachedLLM does
        s.put_many("fp", "chat", [(f"{name}-{i}", c(f"{name} answer {i}")), ("shared", c("same request, both workers"))])
    s.close()


def test_jobs_read_the_cache_write_their_shard_and_merge_loses_nothing(tmp_path):
    cache = tmp_path / "results" / "cache.sqlite"
    base = ResponseCache(cache)
    base.put_many("fp", "score", [("old", c("", logprobs={"1": -0.5, "2": -math.inf}))])
    base.close()
    checkpoint(cache)

    # A job sees what the cache held when the sweep began, and never writes it.
    job = ShardedCache(cache, worker="node1-7")
    got = job.get_many(["old", "nope"])
    assert set(got) == {"old"} and got["old"].logprobs == {"1": -0.5, "2": -math.inf} and got["old"].cached
    job.put_many("fp", "chat", [("new", c("fresh"))])
    assert set(job.get_many(["old", "new"])) == {"old", "new"}
    job.close()
    assert set(rows(cache)) == {"old"}
    assert (shard_dir(cache) / "node1-7.sqlite").is_file()

    # Two more workers in their own processes, writing at the same time.
    procs = [mp.get_context("spawn").Process(target=_worker, args=(str(cache), f"w{i}", 25)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    shards = sorted(p.name for p in shard_dir(cache).iterdir())
    assert shards == ["node1-7.sqlite", "w0.sqlite", "w1.sqlite"]
    expected = {**rows(cache)}
    for s in shard_dir(cache).iterdir():
        expected.update({k: v for k, v in rows(s).items() if k not in expected})

    r = merge_shards(cache)
    assert (r.shards, r.rows, r.added, r.failed) == (3, 1 + 26 + 26, 1 + 25 + 25 + 1, [])
    assert rows(cache) == expected and len(expected) == 1 + 1 + 50 + 1
    assert not shard_dir(cache).exists()
    again = merge_shards(cache)  # nothing left: a no-op
    assert (again.shards, again.added) == (0, 0) and rows(cache) == expected
    # The merged cache serves every completion to a normal (single-machine) run.
    back = ResponseCache(cache)
    assert back.get_many(["w1-24"])["w1-24"].text == "w1 answer 24"
    back.close()


def test_merge_with_keep_is_idempotent_and_first_entry_wins(tmp_path):
    cache = tmp_path / "cache.sqlite"
    base = ResponseCache(cache)
    base.put_many("fp", "chat", [("k", c("in the cache first"))])
    base.close()
    s = ShardedCache(cache, worker="a")
    s.put_many("fp", "chat", [("k", c("a later copy")), ("k2", c("two"))])
    s.close()
    one = merge_shards(cache, keep=True)
    two = merge_shards(cache, keep=True)
    assert (one.shards, one.added) == (1, 1) and (two.shards, two.added) == (1, 0)
    assert (shard_dir(cache) / "a.sqlite").is_file()
    got = ResponseCache(cache)
    assert got.get_many(["k"])["k"].text == "in the cache first" and len(got) == 2
    got.close()


def test_cache_merge_cli_reports_and_keeps_a_broken_shard(tmp_path):
    cache = tmp_path / "cache.sqlite"
    s = ShardedCache(cache, worker="good")
    s.put_many("fp", "chat", [("x", c("x"))])
    s.close()
    (shard_dir(cache) / "bad.sqlite").write_bytes(b"not a database" * 100)
    r = cli("cache", "merge", "--cache", str(cache))
    assert r.returncode == 2, r.stderr
    assert "merged 1 shards" in r.stdout and "1 new" in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.sqlite" in lines[0] and "Traceback" not in r.stderr
    assert (shard_dir(cache) / "bad.sqlite").is_file() and not (shard_dir(cache) / "good.sqlite").exists()
    assert set(rows(cache)) == {"x"}
