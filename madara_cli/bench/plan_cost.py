"""``madara bench --only plan``: ``madara plan``'s estimate beside the time the cell then
takes, for every shipped strategy, after one calibration run.

The calibration run is what a user would do first: one cell in a fresh results folder
(:data:`CALIBRATION`, the demo grid's settings as every cell here), whose timed completions
the plan's fit reads. Then each strategy, in its own copy of that folder (so none finds another's
replies in the cache and runs faster than planned): ``strategy=S limit=--limit`` is planned
(:func:`~madara_cli.experiment.plan.plan_grid`) and run, and its estimate divided by the wall
time and by the engine seconds the cell recorded. A strategy that cannot run here (a hub
reranker) is named with the reason and left out. Not a test: timings are wall-clock.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from madara_cli.bench import BenchOptions, BenchSection, _cfg, _ratio, _x, register_section

# A routed cell sends both kinds of request in numbers (answers, CoT chains, scores, forced
# re-scores: a fit for each); seed 1 draws other queries than the strategies' (seed 0), so
# none of theirs is in the cache and each is estimated, and run, whole.
CALIBRATION = ("strategy=madara", "limit=1", "seed=1")
# The demo grid's settings (configs/grid/demo.yaml), minutes rather than hours on a CPU:
# five documents, scores read as expected digits where the strategy reads scores, a probe
# on two calibration queries; SCORING only where the strategy has that setting.
SETTINGS = ("retriever.k=5", "generation.style=oneshot", "benchmark.calibration=2", "rsc.rescoring=logprob",
            "generation.cot_max_tokens=64", "log_samples=false")
SCORING = "strategy.scoring=logprob"


def _cell(opts: BenchOptions, *overrides: str):
    """The cell with the demo's settings, and its scores read as digits where that applies."""
    from madara_cli.core.errors import ConfigError

    try:
        return _cfg(opts, *overrides, *SETTINGS, SCORING)
    except ConfigError:  # a strategy without scores, or one whose scores are generated text (CoT)
        return _cfg(opts, *overrides, *SETTINGS)


def _copy_results(source: Path, target: Path) -> None:
    """The calibration run's cache and retrieval snapshots (not its cell) in a folder of their own."""
    target.mkdir(parents=True)
    for item in source.iterdir():
        if item.name.startswith("cache.sqlite"):
            shutil.copy2(item, target / item.name)
        elif item.name == "snapshots":
            shutil.copytree(item, target / item.name)


def bench_plan(opts: BenchOptions, scratch: Path) -> dict[str, Any]:
    from madara_cli.config import options
    from madara_cli.core.errors import BackendError, ConfigError, DataError
    from madara_cli.experiment.plan import plan_grid
    from madara_cli.experiment.runner import run_cells

    base = scratch / "plan-calibration"
    t0 = time.perf_counter()
    run_cells([_cell(opts, *CALIBRATION, f"results_dir={base}")])
    out: dict[str, Any] = {"calibration": " ".join(CALIBRATION), "calibration_wall_s": round(time.perf_counter() - t0, 1),
                           "limit": opts.limit, "strategies": {}, "skipped": {}}
    for strategy in options("strategy"):
        folder = scratch / f"plan-{strategy}"
        _copy_results(base, folder)
        try:
            cfg = _cell(opts, f"strategy={strategy}", f"limit={opts.limit}", f"results_dir={folder}")
            plan = plan_grid("bench", [cfg])
            (done,) = run_cells([cfg])
        except (ConfigError, DataError, BackendError) as e:
            out["skipped"][strategy] = str(e).splitlines()[0]
            continue
        total = plan.total()
        record = done.record
        wall, engine = float(record.seconds or 0.0), float(record.engine_seconds)
        out["strategies"][strategy] = {
            "uncached_calls": total.uncached, "estimate_s": round(total.seconds, 2), "wall_s": round(wall, 2), "engine_s": round(engine, 2),
            "ratio_estimate_vs_wall": _ratio(total.seconds, wall), "ratio_estimate_vs_engine": _ratio(total.seconds, engine),
            "calibration": [c.describe() for c in plan.calibrations],
        }
    ratios = [r["ratio_estimate_vs_wall"] for r in out["strategies"].values() if r["ratio_estimate_vs_wall"]]
    out["ratio_estimate_vs_wall_worst"] = max(ratios, key=lambda r: max(r, 1 / r)) if ratios else None
    return out


def plan_rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = [("plan", f"calibration: madara run {r['calibration']} ({r['calibration_wall_s']:.0f}s); then each strategy, "
             f"limit={r['limit']}, planned and run in a copy of its folder: estimate ÷ wall time", "")]
    for name, s in r["strategies"].items():
        rows.append(("plan", f"{name}: {s['uncached_calls']} calls, est. {s['estimate_s']:.0f}s, wall {s['wall_s']:.0f}s, "
                     f"engine {s['engine_s']:.0f}s", _x(s["ratio_estimate_vs_wall"])))
    for name, why in r["skipped"].items():
        rows.append(("plan", f"{name}: not run here ({why[:60]})", "—"))
    return rows


register_section(BenchSection("plan", bench_plan, plan_rows))
