"""Launchers for real on this machine: joblib's worker processes, submitit's local
executor (the same pickling, job folders and result collection as SLURM) and a local
Ray cluster started by the run itself (loopback, 2 CPUs, shut down at the end). Each
runs a 2-cell grid with a grid-wide strategy setting (``strategy.scoring=logprob``,
which NF lacks and 3-Agent has) whose cells, predictions and cache entries must equal a
serial run's; cluster jobs write cache shards that the run folds into cache.sqlite."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.conftest import configs_with_grid, grid_outcome, have
from tests.fakes import chat_answer, cli, posts

GRID = ("axes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf, three_agent]\n"
        "overrides: [limit=1, retriever.k=2, strategy.scoring=logprob]\n")


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
    r = cli("run", "--grid", "pair", f"results_dir={tmp / 'results'}", "backend.n_threads=1", env=env)
    assert r.returncode == 0, r.stderr
    return tmp / "results"


def check_like_serial(results: Path, serial: Path) -> None:
    assert len(grid_outcome(serial)) == 2 and grid_outcome(results) == grid_outcome(serial)
    assert not (results / "cache.sqlite-shards").exists()  # folded in by the run
    assert cache_rows(results) == cache_rows(serial)


PLUGINS = ("hydra_plugins.hydra_submitit_launcher", "hydra_plugins.hydra_ray_launcher", "hydra_plugins.hydra_joblib_launcher")


def test_without_any_hydra_plugin_the_launcher_tests_skip(monkeypatch, tmp_path):
    """With no ``hydra_plugins`` package at all, ``find_spec`` of a plugin raises; the
    skip conditions below must read False (the tests skip) instead of failing collection."""
    for name in [m for m in sys.modules if m.startswith("hydra_plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hydra_plugins", None)  # an import of it now fails, as when never installed
    with pytest.raises(ModuleNotFoundError):
        importlib.util.find_spec(PLUGINS[0])
    assert not any(have(p) for p in PLUGINS)
    (tmp_path / "plugins_here").mkdir()
    (tmp_path / "plugins_here" / "__init__.py").write_text("")
    (tmp_path / "plugins_here" / "launcher.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert have("plugins_here.launcher") and not have("plugins_here.other") and not have("plugins_absent.launcher")


@pytest.mark.llm
@pytest.mark.skipif(not have("hydra_plugins.hydra_submitit_launcher"), reason="pip install -e '.[submitit]'")
def test_submitit_local_grid_matches_serial(tmp_path, serial):
    env = configs_with_grid(tmp_path, "pair", GRID)
    results = tmp_path / "results"
    r = cli("run", "--grid", "pair", "--launcher", "submitit_local", f"results_dir={results}", "backend.n_threads=1", env=env)
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
    r = cli("run", "--grid", "pair", "--launcher", "ray", "-j", "2", f"results_dir={results}", "backend.n_threads=1", env=env)
    assert r.returncode == 0, r.stderr
    assert "grid pair (ray)" in r.stdout
    check_like_serial(results, serial)


@pytest.mark.llm
@pytest.mark.skipif(not have("hydra_plugins.hydra_joblib_launcher"), reason="pip install -e '.[joblib]'")
def test_joblib_grid_with_a_grid_wide_strategy_setting_matches_serial(tmp_path, serial):
    env = configs_with_grid(tmp_path, "pair", GRID)
    results = tmp_path / "results"
    r = cli("run", "--grid", "pair", "--launcher", "joblib", "-j", "2", f"results_dir={results}", env=env)
    assert r.returncode == 0, r.stderr
    assert "grid pair (joblib)" in r.stdout
    assert len(grid_outcome(serial)) == 2 and grid_outcome(results) == grid_outcome(serial)
    assert cache_rows(results) == cache_rows(serial)


def test_jobs_are_the_serial_cells_with_strategy_settings_where_they_apply(monkeypatch, tmp_path):
    from madara_cli.config import load_grid
    from madara_cli.experiment import launch
    from madara_cli.experiment.grid import grid_overrides

    monkeypatch.setenv("MADARA_CONFIGS", configs_with_grid(tmp_path, "pair", GRID)["MADARA_CONFIGS"])
    serial = grid_overrides(load_grid("pair"), ["seed=0,1"])
    jobs = launch.job_overrides("pair", ["seed=0,1", "hydra.launcher.n_jobs=2"], "joblib", 2)
    assert [j[:-1] for j in jobs] == serial and all(j[-1].startswith("backend.n_threads=") for j in jobs)
    assert len(jobs) == 4 and not any("hydra." in o for j in jobs for o in j)  # hydra.* goes to Hydra
    by_strategy = {next(o for o in j if o.startswith("strategy=")): j for j in jobs}
    assert "strategy.scoring=logprob" in by_strategy["strategy=three_agent"]
    assert "strategy.scoring=logprob" not in by_strategy["strategy=nf"]
    assert launch.job_overrides("pair", [], "ray", 2) == grid_overrides(load_grid("pair"), [])


def test_basic_launcher_runs_the_serial_cells_through_hydra(monkeypatch, tmp_path):
    """The whole Hydra path (cells file, one job per cell, compose inside the job) in
    process with the fake engine: the same cell folders and predictions as a serial run."""
    from madara_cli.experiment import launch
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.runner import run_cell
    from madara_cli.results import record_files
    from tests.fakes import FakeBackend

    monkeypatch.setenv("MADARA_CONFIGS", configs_with_grid(tmp_path, "pair", GRID)["MADARA_CONFIGS"])
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        monkeypatch.setattr(launch, "_POOL", pool)
        launched = launch.multirun("pair", [f"results_dir={tmp_path / 'launched'}"], "basic")
        serial = [run_cell(cfg, pool) for cfg in expand("pair", [f"results_dir={tmp_path / 'serial'}"])]

    def predictions(root: Path) -> dict:
        return {f.name: record_files.read_predictions(f) for f in sorted((root / "pair").glob("*/")) if record_files.read_cell(f)}

    assert [c.strategy.get("scoring") for c in launched] == [None, "logprob"]
    assert len(serial) == 2 and predictions(tmp_path / "launched") == predictions(tmp_path / "serial")
    [cells_file] = (tmp_path / "launched" / ".hydra" / "pair").glob("cells-*.json")
    assert len(json.loads(cells_file.read_text())) == 2
    # What `madara run --launcher` prints is read back from disk: both cells, under the serial run's keys.
    back = launch.read_back(launched)
    assert back.missing == [] and [r.cell.key for r in back.finished] == [r.cell.key for r in serial]
    elsewhere = expand("pair", [f"results_dir={tmp_path / 'nothing'}"])
    assert launch.read_back(elsewhere).missing == ["smollm2-135m/mini/nf", "smollm2-135m/mini/three_agent"]


def test_ray_arguments_local_cluster_or_an_address(monkeypatch, tmp_path):
    from madara_cli.experiment import launch

    monkeypatch.setitem(launch.LAUNCHERS, "ray", None)  # the plugin need not be installed to build arguments
    monkeypatch.setenv("MADARA_CONFIGS", configs_with_grid(tmp_path, "pair", GRID)["MADARA_CONFIGS"])
    local = launch.sweep_overrides("pair", [], "ray", 2, "/r/.hydra/pair/cells-x.json", 2, "/r/.hydra/pair")
    assert {"+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init._node_ip_address=127.0.0.1",
            "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.init.object_store_memory=100000000"} <= set(local)
    assert {"hydra.sweep.dir=/r/.hydra/pair", "+madara_cells=/r/.hydra/pair/cells-x.json", "+madara_cell=0,1"} <= set(local)
    remote = launch.sweep_overrides("pair", ["hydra.launcher.ray.init.address=127.0.0.1:6379"], "ray", None, "/c.json", 2, "/r")
    assert not any("num_cpus" in a or "_node_ip_address" in a for a in remote)
    assert "+hydra.launcher.ray.init.object_store_memory=null" in remote  # an existing cluster refuses one
    assert "hydra.launcher.ray.init.address=127.0.0.1:6379" in remote


def test_joblib_adds_worker_threads_only_to_engines_that_have_them(monkeypatch, tmp_path):
    """The backend's spec names the setting (llama.cpp: n_threads); vLLM and servers get
    none (backend.n_threads used to be added to every cell, and backend=openai refused it)."""
    from madara_cli.experiment import launch

    monkeypatch.setenv("MADARA_CONFIGS", configs_with_grid(tmp_path, "pair", GRID)["MADARA_CONFIGS"])
    for backend in ("openai", "vllm"):
        jobs = launch.job_overrides("pair", [f"backend={backend}"], "joblib", 2)
        assert jobs and not any(o.startswith("backend.n_threads") for j in jobs for o in j), jobs
    jobs = launch.job_overrides("pair", ["backend.n_threads=1"], "joblib", 2)
    assert all([o for o in j if o.startswith("backend.n_threads")] == ["backend.n_threads=1"] for j in jobs)


@pytest.mark.llm
@pytest.mark.skipif(not have("hydra_plugins.hydra_joblib_launcher"), reason="pip install -e '.[joblib]'")
def test_joblib_grid_against_an_openai_server(tmp_path, fake_server):
    """The README's joblib + backend=openai recipe, against the scripted server: two
    workers, every request answered, every cell finished."""
    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer(content="Varn")
    grid = ("axes:\n  model: [smollm2-135m]\n  benchmark: [mini]\n  strategy: [nf, pde_random]\n"
            "overrides: [limit=2, retriever.k=2]\n")
    env = configs_with_grid(tmp_path, "served", grid)
    results = tmp_path / "results"
    r = cli("run", "--grid", "served", "--launcher", "joblib", "-j", "2", "backend=openai", f"backend.base_url={fake_server.base_url}",
               f"results_dir={results}", env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "grid served (joblib)" in r.stdout
    cells = grid_outcome(results, "served")
    assert len(cells) == 2 and all(n == 2 for _, _, n, _ in cells.values())
    # NF: one call per question; PDE-Random: one per question and document
    assert len(posts(fake_server, "/v1/chat/completions")) == 2 + 2 * 2


def test_a_fresh_process_drops_a_grid_wide_setting_where_it_does_not_apply():
    """A launcher lays out a grid's cells in a process that composed nothing yet (the
    plug-ins, whose schemas say which strategy has which setting, are not loaded): the
    grid's cell lists must be what the serial run's are, strategy.scoring left off nf."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("from madara_cli.config import GridConfig\nfrom madara_cli.experiment.grid import grid_overrides\n"
            "cells = grid_overrides(GridConfig(name='g', axes={'strategy': ['nf', 'sda']}), ['strategy.scoring=logprob'])\n"
            "print(sorted(c[0] + (' scored' if 'strategy.scoring=logprob' in c else '') for c in cells))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['strategy=nf', 'strategy=sda scored']"
