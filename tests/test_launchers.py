"""Cluster launchers for real on this machine: submitit's local executor (the same
pickling, job folders and result collection as SLURM) and a local Ray cluster started
by the run itself (loopback, 2 CPUs, shut down at the end). Each runs a 2-cell grid
whose cells, predictions and cache entries must equal a serial run's; the jobs write
cache shards that the run folds into cache.sqlite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import configs_with_grid, grid_outcome, have
from tests.test_cli_e2e import madara

GRID = "axes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf, pde_random]\noverrides: [limit=2]\n"


def cache_rows(root: Path) -> dict[str, dict]:
    """Every cached completion but its wall time."""
    db = sqlite3.connect(root / "cache.sqlite")
    try:
        rows = db.execute("SELECT key, completion FROM completions").fetchall()
    finally:
        db.close()
    return {k: {f: v for f, v in json.loads(c).items() if f != "seconds"} for k, c in rows}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    env = configs_with_grid(tmp, "pair", GRID)
    r = madara("run", "--grid", "pair", f"results_dir={tmp / 'results'}", "backend.n_threads=1", env=env)
    assert r.returncode == 0, r.stderr
    return tmp / "results"


def check_like_serial(results: Path, serial: Path) -> None:
    assert len(grid_outcome(serial)) == 2 and grid_outcome(results) == grid_outcome(serial)
    assert not (results / "cache.sqlite-shards").exists()  # folded in by the run
    assert cache_rows(results) == cache_rows(serial)


@pytest.mark.llm
@pytest.mark.skipif(not have("hydra_plugins.hydra_submitit_launcher"), reason="pip install -e '.[submitit]'")
def test_submitit_local_grid_matches_serial(tmp_path, serial):
    env = configs_with_grid(tmp_path, "pair", GRID)
    results = tmp_path / "results"
    r = madara("run", "--grid", "pair", "--launcher", "submitit_local", f"results_dir={results}", "backend.n_threads=1", env=env)
    assert r.returncode == 0, r.stderr
    assert "grid pair (submitit_local)" in r.stdout
    # submitit's job folders (pickled job, logs, result) live beside the results.
    assert len(list((results / ".hydra" / "pair" / ".submitit").glob("*/*_result.pkl"))) == 2
    check_like_serial(results, serial)


@pytest.mark.llm
@pytest.mark.skipif(not have("hydra_plugins.hydra_ray_launcher"), reason="pip install -e '.[ray]'")
def test_ray_local_cluster_grid_matches_serial(tmp_path, serial):
    env = {**configs_with_grid(tmp_path, "pair", GRID), "RAY_USAGE_STATS_ENABLED": "0"}
    results = tmp_path / "results"
    r = madara("run", "--grid", "pair", "--launcher", "ray", "-j", "2", f"results_dir={results}", "backend.n_threads=1", env=env)
    assert r.returncode == 0, r.stderr
    assert "grid pair (ray)" in r.stdout
    check_like_serial(results, serial)


def test_ray_arguments_local_cluster_or_an_address(monkeypatch, tmp_path):
    from madara_cli.experiment import launch

    monkeypatch.setitem(launch.LAUNCHERS, "ray", None)  # the plugin need not be installed to build arguments
    monkeypatch.setenv("MADARA_CONFIGS", configs_with_grid(tmp_path, "pair", GRID)["MADARA_CONFIGS"])
    local = launch.sweep_overrides("pair", [], "ray", 2)
    assert {"+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init._node_ip_address=127.0.0.1",
            "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.init.object_store_memory=100000000"} <= set(local)
    assert "hydra.sweep.dir=${results_dir}/.hydra/pair" in local and "strategy=nf,pde_random" in local
    remote = launch.sweep_overrides("pair", ["hydra.launcher.ray.init.address=127.0.0.1:6379"], "ray", None)
    assert not any("num_cpus" in a or "_node_ip_address" in a for a in remote)
    assert "+hydra.launcher.ray.init.object_store_memory=null" in remote  # an existing cluster refuses one
