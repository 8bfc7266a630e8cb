"""`madara plan`: its estimate of engine calls matches what a run issues."""

from __future__ import annotations

import json

from madara_cli.experiment.grid import expand
from madara_cli.experiment.plan import plan_grid, within
from madara_cli.experiment.runner import EnginePool, run_cell
from tests.test_strategies_e2e import FakeBackend


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
