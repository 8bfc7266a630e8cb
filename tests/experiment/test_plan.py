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
