"""`madara plan`: its estimate of engine calls matches what a run issues."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import expand
from madara_cli.experiment.plan import plan_grid, within
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
def test_demo_plan_is_within_10_percent_of_calls_issued(tmp_path):
    cfgs = expand("demo-full", [f"results_dir={tmp_path}", "limit=4", "benchmark.calibration=4"])
    plan = plan_grid("demo-full", cfgs)
    assert plan.total().cells == len(cfgs) and plan.total().measured_cells == 0

    fake = FakeBackend()
    pool = EnginePool(factory=lambda cfg: fake)
    issued = {}
    for cfg in cfgs:
        res = run_cell(cfg, pool)
        issued[cfg.strategy.name] = res.metrics["accounting"]["calls_issued"]
    total = sum(issued.values())
    assert fake.chat_calls + fake.score_calls == total
    assert within(plan.total().calls, total), (plan.total().calls, total)

    after = plan_grid("demo-full", cfgs)
    for name, n in issued.items():
        assert after.by_strategy[name].measured_calls == n
    # Planning never writes where runs look (no probe or cell from placeholder replies).
    assert all(json.loads(p.read_text())["accounting"]["calls_issued"] >= 0 for p in tmp_path.glob("demo-full/*/metrics.json"))
    assert len(list(tmp_path.glob("demo-full/*/metrics.json"))) == len(cfgs)


@pytest.mark.llm
def test_plan_computes_the_engine_fingerprint_without_loading_it():
    """`already cached` looks up the real cache, so the plan's fingerprint must be the one
    the loaded engine puts in every cache key."""
    pytest.importorskip("llama_cpp")
    from madara_cli.backends import make_backend
    from madara_cli.composition import compose
    from madara_cli.experiment.plan import _fingerprint

    cfg = compose(["backend.n_threads=1", "backend.n_ctx=1024"])
    backend = make_backend(cfg)
    try:
        assert _fingerprint(cfg) == backend.fingerprint
    finally:
        backend.close()


def test_walking_the_queries_in_blocks_counts_what_one_walk_counts(tmp_path, monkeypatch):
    """The plan walks a block of queries at a time (memory: docs/benchmarks.md); every
    count per strategy is the same as one walk over all of them."""
    from madara_cli.experiment import plan as plan_module

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")  # no GGUF file to fingerprint
    cfgs = expand("demo-full", [f"results_dir={tmp_path}", "limit=6", "benchmark.calibration=4"])
    whole = plan_grid("demo-full", cfgs).by_strategy
    monkeypatch.setattr(plan_module, "WALK_BLOCK", 4)  # 6 queries: a block of 4, then one of 2
    blocks = plan_grid("demo-full", cfgs).by_strategy
    assert whole == blocks and sum(s.requests for s in whole.values()) > 0


def test_plan_of_table2_times_vllm_and_counts_the_routing_probe(tmp_path, monkeypatch, capsys):
    """The issue's check: `madara plan --grid table2` (data not here: placeholders) sizes
    CONFLICTS at its 458 queries, counts strategy=madara's RSC probe on the 100
    calibration queries, bounds the output tokens and gives a vLLM time at --rate."""
    from tests.fakes import cli

    code, out, err = cli("plan", "--grid", "table2", "--results", str(tmp_path), "--rate", "25", "backend=vllm", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "estimated for 458 queries" in text and "its known size 458" in text and "--rate 25 calls/s" in text
    assert "not estimated" not in text  # the routed cells' probe is walked on placeholder calibration queries

    cfgs = expand("table2", [f"results_dir={tmp_path}", "backend=vllm"])
    plan = plan_grid("table2", cfgs, rate=25.0)
    madara, nf = plan.by_strategy["madara"], plan.by_strategy["nf"]
    assert nf.queries == 5 * (458 + 1000)  # five models on CONFLICTS (458) and FEVER (~1K sampled)
    assert madara.probe_requests > 0 and madara.requests > madara.probe_requests
    # Calls are counted once across the grid: the routed treatment is wholly another
    # strategy's calls, and of each of the ten probes (100 calibration queries, k=10) the
    # NF pass (100) and the Relevance Assessor's chains (100 x 10) are the nf and cot cells'
    # own requests, which a run finds in the cache; the rest of the probe is new.
    assert madara.calls == madara.probe_requests - 10 * (100 + 100 * 10)
    total = plan.total()
    assert total.seconds == pytest.approx((total.calls - total.cached) / 25.0) and total.output_tokens > total.calls
    with pytest.raises(ValueError, match="must be > 0"):
        plan_grid("table2", cfgs[:1], rate=0)


def test_finished_cells_cost_nothing_more(tmp_path, monkeypatch):
    from madara_cli.experiment import plan as plan_module

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    cfgs = [c for c in expand("demo-full", [f"results_dir={tmp_path}", "limit=3", "benchmark.calibration=3"]) if c.strategy.name in ("nf", "pde")]
    before = plan_grid("demo-full", cfgs).by_strategy
    assert before["nf"].calls > 0 and before["pde"].calls > 0 and before["pde"].output_tokens > 0
    pool = EnginePool(factory=lambda cfg: FakeBackend())
    run_cell(next(c for c in cfgs if c.strategy.name == "nf"), pool)
    after = plan_grid("demo-full", cfgs, rate=10.0).by_strategy
    assert (after["nf"].finished_cells, after["nf"].calls, after["nf"].prompt_tokens, after["nf"].seconds) == (1, 0, 0, 0.0)
    assert after["pde"].finished_cells == 0 and after["pde"].calls == before["pde"].calls


def _walked_here(monkeypatch) -> list[str]:
    """The strategies of the cells this process walks (a forked walker counts in its own copy)."""
    from madara_cli.experiment import plan as plan_module

    here: list[str] = []
    walk = plan_module.Planner.walk

    def spy(self, cfg):
        here.append(str(cfg.strategy.name))
        return walk(self, cfg)

    monkeypatch.setattr(plan_module.Planner, "walk", spy)
    return here


def test_a_grid_planned_in_several_processes_is_the_plan_of_one(tmp_path, monkeypatch):
    """`plan_cells` forks walkers that compose and walk blocks of cells while this process
    counts each walk in grid order: every number, note, calibration and cell is the one
    process's plan. A routed cell (its probe is the grid's) is walked here; a finished
    cell is counted as measured wherever it was found."""
    from madara_cli.commands.plan_output import to_json
    from madara_cli.composition import compose
    from madara_cli.experiment import plan as plan_module
    from madara_cli.experiment.grid import grid_cells

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    cells = grid_cells("demo-full", [f"results_dir={tmp_path}", "limit=3", "benchmark.calibration=3", "seed=0,1"])
    assert len(cells) == 22
    run_cell(compose(cells[0]), EnginePool(factory=lambda cfg: FakeBackend()))  # one finished cell
    whole = to_json(plan_grid("demo-full", expand("demo-full", [f"results_dir={tmp_path}", "limit=3", "benchmark.calibration=3", "seed=0,1"])), "t")
    one = to_json(plan_module.plan_cells("demo-full", cells, jobs=1), "t")
    here = _walked_here(monkeypatch)
    two = to_json(plan_module.plan_cells("demo-full", cells, jobs=2), "t")
    assert one == whole and two == one
    assert sorted(here) == ["madara", "madara"]  # the other 20 cells were walked by the walkers
    assert two["total"]["finished_cells"] == 1 and two["total"]["calls"] > 0 and two["calibrations"]


def test_a_cell_that_fails_in_a_walker_fails_the_plan_as_in_one_process(tmp_path, monkeypatch):
    """A walker that cannot compose or walk a cell leaves it to this process, which raises
    the error in grid order, as a plan in one process does."""
    from madara_cli.core.errors import ConfigError, DataError
    from madara_cli.experiment import plan as plan_module
    from madara_cli.experiment.grid import grid_cells

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    cells = grid_cells("demo-full", [f"results_dir={tmp_path}", "limit=2", "benchmark.calibration=2", "seed=0,1"])
    missing = tmp_path / "missing.jsonl"
    cells[13] = [*cells[13], "benchmark=jsonl", f"benchmark.path={missing}"]
    failing = next(o.split("=", 1)[1] for o in cells[13] if o.startswith("strategy="))
    errors = []
    for jobs in (1, 2):
        here = _walked_here(monkeypatch)
        with pytest.raises((ConfigError, DataError)) as e:
            plan_module.plan_cells("demo-full", cells, jobs=jobs)
        errors.append(str(e.value))
        if jobs == 2:  # the walkers walked the cells before it (no routed one among them): here, only the failing one
            assert here == [failing]
        monkeypatch.undo()
        monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    assert errors[0] == errors[1] and str(missing) in errors[0]


def test_plan_jobs_forks_walkers_only_for_a_large_grid():
    import os
    import sys

    from madara_cli.experiment.plan import PARALLEL_FROM, plan_jobs

    assert plan_jobs(PARALLEL_FROM - 1) == 1 and plan_jobs(5, jobs=3) == min(3, os.cpu_count()) and plan_jobs(5, jobs=0) == 1
    assert plan_jobs(5, jobs=100_000) == os.cpu_count()  # never more walkers than CPUs: they would only take turns
    if sys.platform == "linux":
        assert plan_jobs(100_000) == max(1, min(len(os.sched_getaffinity(0)), 8))


def test_plan_with_more_jobs_than_cpus_says_so_and_plans(tmp_path, monkeypatch, capsys):
    """`madara plan -j 100000` forked without a cap (699 processes after 8 s, the machine
    crawled): capped at the CPU count, said in one line, and the plan is the same."""
    import os

    from madara_cli.experiment import plan as plan_module
    from tests.fakes import cli

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    code, out, err = cli("plan", "--grid", "demo", "--results", str(tmp_path), "--json", "-j", "100000", "limit=2",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert f"plan: -j 100000 is more than this machine's {os.cpu_count()} CPUs; planning with {os.cpu_count()} processes" in err
    assert json.loads(out)["cells"] == 2


def test_plan_with_jobs_prints_the_plan_of_one_process(tmp_path, monkeypatch, capsys):
    """`madara plan --grid G -j 2` (what a 10,000-cell grid gets by default) prints what
    `-j 1` prints."""
    from madara_cli.experiment import plan as plan_module
    from tests.fakes import cli

    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    outs = []
    for jobs in ("1", "2"):
        code, out, err = cli("plan", "--grid", "demo-full", "--results", str(tmp_path), "--json", "-j", jobs, "limit=2",
                             "benchmark.calibration=2", "seed=0,1", monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err
        outs.append(json.loads(out))
    assert outs[0] == outs[1] and outs[0]["cells"] == 22


def _children(pid: int) -> list[int]:
    import subprocess

    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "zombie" not in state


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the walker processes")
@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated:"), (signal.SIGINT, 130, "interrupted:")])
def test_a_plan_stopped_while_its_walkers_run_leaves_none_behind(tmp_path, sig, code, word):
    """SIGTERM or Ctrl-C of `madara plan` on a grid large enough for walker processes:
    its one line and exit status, and no walker left running. (`-j 2`: under xdist each
    test worker holds one CPU, where the default is one process.)"""
    from tests.fakes import one_line_error, spawn

    proc = spawn("plan", "--grid", "demo-full", "--results", str(tmp_path), "-j", "2", "limit=1", "seed=range(0,40)",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    walkers: list[int] = []
    deadline = time.monotonic() + 120
    while len(walkers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        walkers = _children(proc.pid)
        time.sleep(0.2)
    assert walkers, f"no walker process started (exit {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}"
    time.sleep(1.0)  # the walkers are composing and walking
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    one_line_error(proc.returncode, "\n".join(ln for ln in err.splitlines() if "cells/s" not in ln), word)  # progress lines apart
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in walkers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in walkers)


def _walkers_of(proc: subprocess.Popen, n: int = 2) -> list[int]:
    walkers: list[int] = []
    deadline = time.monotonic() + 120
    while len(walkers) < n and time.monotonic() < deadline and proc.poll() is None:
        walkers = _children(proc.pid)
        time.sleep(0.05)
    assert walkers, f"no walker process started (exit {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}"
    return walkers


def _gone(walkers: list[int]) -> bool:
    deadline = time.monotonic() + 30  # the kernel's signal and the exit: not a measure of speed
    while any(_alive(p) for p in walkers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in walkers)


# Walkers that never finish a walk, so the test finds them running.
_STUCK_WALKS = "import time\nfrom madara_cli.experiment import plan\nplan.Planner.walk = lambda self, cfg: time.sleep(600)"
# Walkers held just after their fork, before they set their own signal handlers: what a
# SIGTERM to the process group (`timeout`) met while -j 100000 forked.
_SLOW_START = ("import time\nimport multiprocessing.pool as mp\n_worker = mp.worker\n"
               "def _late(*a, **k):\n    time.sleep(3)\n    return _worker(*a, **k)\nmp.worker = _late")


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the walker processes")
def test_no_walker_outlives_a_plan_that_was_killed(tmp_path):
    """SIGKILL of `madara plan` (no handler runs): its walkers end with it (`timeout`
    left about 130 of them behind, orphaned)."""
    from tests.fakes import spawn

    proc = spawn("plan", "--grid", "demo", "--results", str(tmp_path), "-j", "2", "seed=range(0,8)", prelude=_STUCK_WALKS,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    walkers = _walkers_of(proc)
    proc.kill()
    proc.communicate(timeout=120)
    assert _gone(walkers), "walker processes outlived their plan"


@pytest.mark.llm
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the walker processes")
def test_a_plan_terminated_with_its_process_group_prints_no_walker_traceback(tmp_path):
    """SIGTERM to the whole process group (as `timeout` sends it) while the walkers start:
    the plan's one line, no worker's traceback, no walker left."""
    import os

    from tests.fakes import one_line_error, spawn

    proc = spawn("plan", "--grid", "demo", "--results", str(tmp_path), "-j", "2", "seed=range(0,8)", prelude=_SLOW_START,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    walkers = _walkers_of(proc)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    one_line_error(proc.returncode, "\n".join(ln for ln in err.splitlines() if "cells/s" not in ln), "terminated:")
    assert proc.returncode == 143 and _gone(walkers)


def test_a_grid_over_many_strategy_files_lists_and_stamps_its_folder_once(tmp_path, monkeypatch, capsys):
    """A --config-dir grid over 10,000 strategy files printed nothing in 400 s: the grid's
    check listed the strategy folder once for every value of its axis, and a folder too
    large to stamp was walked again for every cell. Counted here on a small folder (and a
    stamp limit lowered to match): neither is done once per value or cell."""
    import os
    import sys

    import madara_cli.composition.compose  # noqa: F401 - the module, not the function the package exports
    from madara_cli.experiment import plan as plan_module
    from tests.fakes import cli

    compose_module = sys.modules["madara_cli.composition.compose"]
    mine = tmp_path / "mine"
    (mine / "strategy").mkdir(parents=True)
    (mine / "grid").mkdir()
    names = [f"s{i:02d}" for i in range(12)]
    for i, name in enumerate(names):
        (mine / "strategy" / f"{name}.yaml").write_text(f"defaults:\n  - pde_schema\n  - _self_\nname: {name}\ntop_k: {1 + i % 5}\n")
    (mine / "grid" / "many.yaml").write_text(f"name: many\naxes:\n  strategy: [{', '.join(names)}]\noverrides: [limit=2]\n")
    listed, walked = [], []
    glob, walk = Path.glob, os.walk
    monkeypatch.setattr(Path, "glob", lambda self, pattern: (listed.append(self), glob(self, pattern))[1])
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: (walked.append(top), walk(top, *a, **k))[1])
    monkeypatch.setattr(compose_module, "_STATE_FILES_MAX", 5)  # the folder is "too large to stamp"
    monkeypatch.setattr(compose_module, "_RACY_S", 0.0)  # and its files, written just now, are not "changing"
    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    code, out, err = cli("--config-dir", str(mine), "plan", "--grid", "many", "--results", str(tmp_path / "r"), "--json", "-j", "1",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert json.loads(out)["cells"] == 12
    assert sum(1 for p in listed if Path(p) == mine / "strategy") < len(names) // 2, "the strategy folder was listed once per grid value"
    assert sum(1 for p in walked if Path(p) == mine) <= 1, "the config folder was stamped once per cell"
