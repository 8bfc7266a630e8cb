"""The CLI as a user types it: one real NF cell through llama.cpp, its rerun from the
cache, and the one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, configs_with_grid, grid_outcome
from tests.fakes import cli, only_cell


@pytest.mark.llm
def test_nf_cell_runs_and_rerun_is_free(results_dir):
    args = ["run", "model=smollm2-135m", "benchmark=mini", "strategy=nf", "limit=4", f"results_dir={results_dir}"]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert "EM %" in first.stdout and "smollm2-135m" in first.stdout
    cell = only_cell(results_dir)
    m1 = json.loads((cell / "metrics.json").read_text())
    assert m1["n"] == 4 and m1["accounting"]["calls_issued"] == 4
    rows = [json.loads(x) for x in (cell / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["doc_ids"]) == 10 for r in rows)

    # Same cell again: finished, so nothing runs at all.
    again = cli(*args)
    assert again.returncode == 0 and "done earlier" in again.stdout

    # Forced re-run: every completion comes from the cache, metrics identical.
    forced = cli(*args, "force=true")
    assert forced.returncode == 0, forced.stderr
    m2 = json.loads((cell / "metrics.json").read_text())
    assert m2["accounting"]["calls_issued"] == 0 and m2["accounting"]["cache_hits"] == 4
    assert (m2["em"], m2["f1"], m2["contains"]) == (m1["em"], m1["f1"], m1["contains"])
    assert [json.loads(x) for x in (cell / "predictions.jsonl").read_text().splitlines()] == rows


@pytest.mark.llm
def test_grid_runs_every_cell(tmp_path, results_dir):
    env = configs_with_grid(tmp_path, "tiny", "axes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf]\noverrides: [limit=2]\n")
    r = cli("run", "--grid", "tiny", f"results_dir={results_dir}", "seed=1", env=env)
    assert r.returncode == 0, r.stderr
    assert (only_cell(results_dir).parent.name) == "tiny"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "model=no-such-model"], "valid models: gemma-2-27b"),
        (["run", "--foo"], "valid options: --cfg, --config-dir, --grid, --include"),
        (["run", "strategy=nope"], "valid strategies: "),
        (["run", "--grid", "nope"], "valid grids: "),
        (["run", "limt=3"], "bad config"),
        (["frobnicate"], "valid commands: "),
    ],
)
def test_user_errors_are_one_line_exit_2(args, needle):
    r = cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.llm
def test_launcher_sees_config_dir_options(tmp_path):
    """A grid and a strategy that exist only in a --config-dir folder run through a
    launcher: the sweep composes from the same search path as `madara run`."""
    user = tmp_path / "mine"
    (user / "grid").mkdir(parents=True)
    (user / "strategy").mkdir()
    (user / "strategy" / "nf_mine.yaml").write_text((ROOT / "configs" / "strategy" / "nf.yaml").read_text())
    (user / "grid" / "mygrid.yaml").write_text("name: mygrid\naxes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf_mine]\noverrides: [limit=1]\n")
    results = tmp_path / "results"
    r = cli("--config-dir", str(user), "run", "--grid", "mygrid", "--launcher", "joblib", "-j", "1", f"results_dir={results}")
    assert r.returncode == 0, r.stderr
    [cell] = results.glob("mygrid/*/metrics.json")
    assert json.loads(cell.read_text())["n"] == 1


@pytest.mark.llm
def test_joblib_launcher_matches_serial(tmp_path):
    env = configs_with_grid(tmp_path, "pair", "axes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf, pde_random]\noverrides: [limit=2]\n")
    par, ser = tmp_path / "parallel", tmp_path / "serial"
    # No backend.n_threads here: the launcher sets it per worker, and a thread count
    # must not change cell identity, or the read-back would not find the workers' cells.
    p = cli("run", "--grid", "pair", "--launcher", "joblib", "-j", "2", f"results_dir={par}", env=env)
    assert p.returncode == 0, p.stderr
    assert len(list(par.glob("pair/*/metrics.json"))) == 2  # exactly the serial run's folders, none twice
    s = cli("run", "--grid", "pair", f"results_dir={ser}", "backend.n_threads=1", env=env)
    assert s.returncode == 0, s.stderr
    assert sorted(p.name for p in par.glob("pair/*")) == sorted(p.name for p in ser.glob("pair/*"))

    assert grid_outcome(par) == grid_outcome(ser) and len(grid_outcome(par)) == 2
