"""``madara plan``'s estimated engine time beside the measured one (issue 36): after one
calibration run, a 3-Agent cell and the demo grid are planned, then run, and each
estimate is printed beside the time the run took (the figures in docs/benchmarks.md).

    python scripts/bench_plan_cost.py                   # SmolLM2-135M on llama.cpp (CPU), mini benchmark
    python scripts/bench_plan_cost.py --limit 3 -- model=... backend=...

Everything runs in a fresh results folder and response cache, each command in a child
process as a user types it:

1. the calibration run: ``madara run strategy=three_agent limit=1`` (with the overrides
   below); its completions, timed one by one, are what the plan's fit is measured on;
2. every case planned, ``madara plan ... --json`` (the estimate of the calls the cache
   does not hold yet, and the calibration it names), before any runs; then each run,
   ``madara run ...`` of the same cells: its wall time, and the engine seconds its cells
   record (``timing.engine_seconds``);
3. a table: estimate, measured engine seconds and wall time, and the ratios.

Not a test: nothing here can fail but the commands themselves. Run it on an otherwise
idle machine when the ratios are to be quoted; ``--json FILE`` keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def madara(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """One ``madara`` command in a child process: (its result, wall seconds)."""
    environ = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "madara_cli.cli", *args], capture_output=True, text=True, env=environ, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"madara {' '.join(args)}: exit {proc.returncode}")
    return proc, wall


def engine_seconds(results: Path, folders: set[str]) -> float:
    """Engine seconds the cells in ``folders`` record (the calls their run issued)."""
    total = 0.0
    for metrics in results.glob("*/*/metrics.json"):
        if metrics.parent.name in folders:
            record = json.loads(metrics.read_text(encoding="utf-8"))
            # the timing section's; a record written before it had them in its accounting
            total += float((record.get("timing") or {}).get("engine_seconds", record.get("accounting", {}).get("seconds", 0.0)))
    return total


def cell_folders(results: Path) -> set[str]:
    return {m.parent.name for m in results.glob("*/*/metrics.json")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=2, help="queries of the measured runs (the calibration run has one)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    ap.add_argument("overrides", nargs="*", default=[], help="overrides for every command (model=..., backend=..., retriever.k=5)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="madara-plan-cost-") as tmp:
        results = Path(tmp) / "results"
        common = [*args.overrides, f"results_dir={results}"]
        _, cal_wall = madara("run", "strategy=three_agent", "limit=1", *common)
        print(f"calibration run: madara run strategy=three_agent limit=1 {' '.join(args.overrides)}: {cal_wall:.0f} s wall")
        cases = [
            ("3-Agent cell", ["strategy=three_agent", f"limit={args.limit}", *common]),
            ("demo grid", ["--grid", "demo", f"limit={args.limit}", *common]),
        ]
        # Every case is planned right after the calibration run, before any of them runs.
        plans = {name: json.loads(madara("plan", "--json", *cmd)[0].stdout) for name, cmd in cases}
        rows = []
        for name, cmd in cases:
            plan = plans[name]
            before = cell_folders(results)
            _, wall = madara("run", *cmd)
            new = cell_folders(results) - before
            engine = engine_seconds(results, new)
            est = plan["total"]["est_seconds"] or 0.0
            rows.append({
                "case": name, "command": "madara run " + " ".join(cmd[:-1]), "cells_run": len(new),
                "uncached_calls": plan["total"]["uncached"], "estimate_s": round(est, 1), "engine_s": round(engine, 1),
                "wall_s": round(wall, 1), "estimate_over_engine": round(est / engine, 3) if engine else None,
                "estimate_over_wall": round(est / wall, 3) if wall else None,
                "calibration": [c["basis"] for c in plan["calibrations"]],
            })
    print()
    print(f"{'case':<14}{'calls':>7}{'estimate':>10}{'engine':>9}{'wall':>8}{'est/engine':>12}{'est/wall':>10}")
    for r in rows:
        print(f"{r['case']:<14}{r['uncached_calls']:>7}{r['estimate_s']:>9.0f}s{r['engine_s']:>8.0f}s{r['wall_s']:>7.0f}s"
              f"{r['estimate_over_engine'] or float('nan'):>12.2f}{r['estimate_over_wall'] or float('nan'):>10.2f}")
    for r in rows:
        print(f"{r['case']}: {r['command']}; calibration: {'; '.join(r['calibration'])}")
    if args.json is not None:
        args.json.write_text(json.dumps({"calibration_wall_s": round(cal_wall, 1), "cases": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
