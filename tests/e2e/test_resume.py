"""A killed run resumes from the response cache: no completed call is issued twice,
and the metrics equal those of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from tests.fakes import cli, spawn

N = 12


def _cached(path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0


def _args(results) -> list[str]:
    return ["run", "strategy=nf", f"limit={N}", "backend.batch_size=1", f"results_dir={results}"]


def _metrics(results) -> dict:
    (path,) = list(results.glob("adhoc/*/metrics.json"))
    return json.loads(path.read_text())


@pytest.mark.llm
def test_sigkill_mid_stage_then_resume(tmp_path):
    killed = tmp_path / "killed"
    proc = spawn(*_args(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    cache = killed / "cache.sqlite"
    deadline = time.time() + 300
    while _cached(cache) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _cached(cache)
    assert 3 <= done_before < N, "the run should have been killed mid-stage"
    assert not list(killed.glob("adhoc/*/metrics.json")), "a killed cell must not look finished"

    resumed = cli(*_args(killed))
    assert resumed.returncode == 0, resumed.stderr
    m = _metrics(killed)
    assert m["accounting"]["calls_issued"] == N - done_before
    assert m["accounting"]["cache_hits"] == done_before

    clean = tmp_path / "clean"
    r = cli(*_args(clean))
    assert r.returncode == 0, r.stderr
    c = _metrics(clean)
    assert (m["em"], m["f1"], m["contains"]) == (c["em"], c["f1"], c["contains"])
    preds = lambda r: [json.loads(x)["raw"] for x in next(r.glob("adhoc/*/predictions.jsonl")).read_text().splitlines()]  # noqa: E731
    assert preds(killed) == preds(clean)
