"""`madara plan`: its estimate of engine calls matches what a run issues."""

from __future__ import annotations

import json

import pytest

from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import expand
from madara_cli.experiment.plan import plan_grid, within
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
def test_demo_plan_is_within_10_percent_of_calls_issued(tmp_path):
    cfgs = expand("demo", [f"results_dir={tmp_path}", "limit=4", "benchmark.calibration=4"])
    plan = plan_grid("demo", cfgs)
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

    after = plan_grid("demo", cfgs)
    for name, n in issued.items():
        assert after.by_strategy[name].measured_calls == n
    # Planning never writes where runs look (no probe or cell from placeholder replies).
    assert all(json.loads(p.read_text())["accounting"]["calls_issued"] >= 0 for p in tmp_path.glob("demo/*/metrics.json"))
    assert len(list(tmp_path.glob("demo/*/metrics.json"))) == len(cfgs)


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
    cfgs = expand("demo", [f"results_dir={tmp_path}", "limit=6", "benchmark.calibration=4"])
    whole = plan_grid("demo", cfgs).by_strategy
    monkeypatch.setattr(plan_module, "WALK_BLOCK", 4)  # 6 queries: a block of 4, then one of 2
    blocks = plan_grid("demo", cfgs).by_strategy
    assert whole == blocks and sum(s.requests for s in whole.values()) > 0
