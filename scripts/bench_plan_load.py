"""Load check for ``madara plan``: a large JSONL benchmark and corpus, wall time and peak
memory; or a grid of many cells, cells per second (the figures in docs/benchmarks.md).

    python scripts/bench_plan_load.py                       # 50,000 rows, 20,000 documents
    python scripts/bench_plan_load.py --rows 5000 --docs 2000 --strategies nf pde
    python scripts/bench_plan_load.py --cells 10000         # a grid of 10,000 cells: compose and plan, cells/s

With ``--cells N`` it builds a grid of N cells (``--strategies`` x ``seed=range(...)``,
the mini benchmark, one query a cell) and, in a fresh process each, composes every cell
as a grid composes (each cell from its group choices' remembered base and each value
override's remembered changes: madara_cli.composition.compose), composes a sample
of them whole, and runs ``madara plan --grid`` over all of them, in one process (``-j 1``)
and with its walker processes (the default): each as cells per second, the fast and whole
composition side by side, one process and walkers side by side.

Writes, in a temporary folder, a ``benchmark=jsonl`` file of ``--rows`` questions without
documents of their own (so every one is retrieved for) and a corpus of ``--docs``
documents, then runs ``madara plan`` over a one-axis grid of ``--strategies`` in a child
process, twice: the first run builds the bm25s index and the retrieval snapshot, the
second reads both back. For each it prints the wall time and the peak RSS of that
process (``resource.getrusage(RUSAGE_SELF)`` at its exit).
Not a test: nothing here can fail but the command itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("river tower city island king queen poet war treaty mountain bridge river painter novel empire "
         "harbour castle saint bishop railway engine comet physicist opera symphony glacier desert canal").split()


def write_data(folder: Path, rows: int, docs: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    corpus = folder / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i in range(docs):
            text = " ".join(rng.choice(WORDS) for _ in range(80))
            f.write(json.dumps({"id": f"d{i}", "title": f"Title {i} {rng.choice(WORDS)}", "text": f"Name{i} {text}"}) + "\n")
    bench = folder / "bench.jsonl"
    with bench.open("w", encoding="utf-8") as f:
        for i in range(rows):
            q = " ".join(rng.choice(WORDS) for _ in range(8))
            f.write(json.dumps({"id": f"q{i}", "question": f"Which {q} is Name{rng.randrange(docs)}?", "answers": [f"Name{i % docs}"]}) + "\n")
    return bench, corpus


# The child runs the CLI in process and reports its own peak RSS on the way out.
CHILD = (
    "import atexit, resource, runpy, sys\n"
    "atexit.register(lambda: print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
    "sys.argv = ['madara', *sys.argv[1:]]\n"
    "runpy.run_module('madara_cli.cli', run_name='__main__')\n"
)


def run_plan(configs: Path, bench: Path, corpus: Path, results: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of one ``madara plan`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p), "COLUMNS": "200"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "--config-dir", str(configs), "plan", "--grid", "load",
         f"benchmark.path={bench}", f"benchmark.corpus={corpus}", f"results_dir={results}", f"cache={results / 'cache.sqlite'}"],
        capture_output=True, text=True, env=env,
    )
    wall = time.perf_counter() - t0
    peak = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KIB ")]
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
    return wall, (peak[-1] / 1024 if peak else float("nan")), proc.returncode


# Composes the grid's cells in this child: every cell the fast way, then a sample whole
# (the defaults step not remembered); prints the seconds of each.
COMPOSE = (
    "import importlib, sys, time\n"
    "from madara_cli.config import load_grid\n"
    "from madara_cli.composition import compose, load_plugins\n"
    "from madara_cli.experiment.grid import grid_overrides\n"
    "load_plugins()\n"
    "cells = grid_overrides(load_grid('scale'), sys.argv[1:])\n"
    "from madara_cli.composition.compose import held_state\n"
    "t0 = time.perf_counter()\n"
    "with held_state(): [compose(o) for o in cells]  # as a grid composes (madara_cli.experiment.grid.expand)\n"
    "fast = time.perf_counter() - t0\n"
    "step = max(1, len(cells) // 40); sample = cells[::step]\n"
    "importlib.import_module('madara_cli.composition.compose')._search_state = lambda head: None\n"
    "t0 = time.perf_counter(); [compose(o) for o in sample]; whole = time.perf_counter() - t0\n"
    "print('COMPOSED', len(cells), fast, len(sample), whole)\n"
)


def grid_at_scale(n_cells: int, strategies: list[str]) -> int:
    """Compose and plan a grid of about ``n_cells`` cells; print cells/s."""
    seeds = max(1, n_cells // len(strategies))
    with tempfile.TemporaryDirectory(prefix="madara-plan-scale-") as tmp:
        folder = Path(tmp)
        configs = folder / "configs"
        (configs / "grid").mkdir(parents=True)
        (configs / "grid" / "scale.yaml").write_text(
            f"name: scale\naxes:\n  strategy: [{', '.join(strategies)}]\n"
            "overrides: [benchmark=mini, limit=1, strategy.scoring=logprob]\n", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
               "MADARA_CONFIG_DIR": str(configs), "COLUMNS": "100"}
        sweep = [f"seed=range(0,{seeds})", f"results_dir={folder / 'results'}"]
        proc = subprocess.run([sys.executable, "-c", COMPOSE, *sweep], capture_output=True, text=True, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("COMPOSED ")), None)
        if proc.returncode != 0 or line is None:
            print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
            return proc.returncode or 1
        _, n, fast, n_sample, whole = line.split()
        fast_rate, whole_rate = int(n) / float(fast), int(n_sample) / float(whole)
        print(f"compose {int(n):,} cells: {fast_rate:,.1f} cells/s ({float(fast):.1f} s); whole, {n_sample} of them: "
              f"{whole_rate:,.1f} cells/s; fast / whole: {fast_rate / whole_rate:.1f}x")
        walls, printed = {}, []
        for label, jobs in (("one process", ["-j", "1"]), ("walkers (the default)", [])):
            t0 = time.perf_counter()
            plan = subprocess.run([sys.executable, "-c", CHILD, "plan", "--grid", "scale", "--json", *jobs, *sweep],
                                  capture_output=True, text=True, env=env)
            walls[label] = time.perf_counter() - t0
            printed.append(plan.stdout)
            if plan.returncode != 0:
                print(plan.stdout[-2000:], plan.stderr[-4000:], sep="\n", file=sys.stderr)
                return plan.returncode
            print(f"madara plan --grid scale, {label} ({int(n):,} cells, compose included): {walls[label]:.1f} s wall, "
                  f"{int(n) / walls[label]:,.1f} cells/s")
        one, walkers = walls.values()
        print(f"walkers / one process: {one / walkers:.2f}x faster ({os.cpu_count()} CPUs); "
              f"the same plan: {'yes' if printed[0] == printed[1] else 'NO'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--strategies", nargs="+", default=None, help="default: nf (rows), nf pde three_agent sda (--cells)")
    ap.add_argument("--cells", type=int, default=None, help="a grid of this many cells instead: compose and plan cells/s")
    args = ap.parse_args()
    if args.cells is not None:
        return grid_at_scale(args.cells, args.strategies or ["nf", "pde", "three_agent", "sda"])
    args.strategies = args.strategies or ["nf"]
    with tempfile.TemporaryDirectory(prefix="madara-plan-load-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        bench, corpus = write_data(folder, args.rows, args.docs)
        print(f"data: {args.rows:,} rows ({bench.stat().st_size / 2**20:.1f} MiB), {args.docs:,} documents "
              f"({corpus.stat().st_size / 2**20:.1f} MiB), written in {time.perf_counter() - t0:.1f} s")
        configs = folder / "configs"
        (configs / "grid").mkdir(parents=True)
        (configs / "grid" / "load.yaml").write_text(
            f"name: load\naxes:\n  strategy: [{', '.join(args.strategies)}]\noverrides: [benchmark=jsonl]\n", encoding="utf-8")
        results = folder / "results"
        for label in ("first plan (builds the index and the snapshot)", "second plan (reads both back)"):
            wall, rss, code = run_plan(configs, bench, corpus, results)
            print(f"{label}: {wall:.1f} s wall, peak RSS {rss:.0f} MiB, exit {code}")
            if code != 0:
                return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
