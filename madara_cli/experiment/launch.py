"""Grid cells through Hydra's multirun and its launcher plugins.

``madara run --grid G --launcher joblib`` hands the grid's cells to Hydra as a sweep, one job
per cell: ``joblib`` runs them in parallel processes here, ``submitit_slurm`` on SLURM, ``ray``
on a Ray cluster. The cells are the serial run's exactly (:func:`~madara_cli.experiment.grid.grid_overrides`),
written once to ``<results>/.hydra/<grid>/cells-<hash>.json``; job ``i`` composes cell ``i`` and
runs it. Every job writes the same results folder and shares the SQLite response cache, so
parallel and serial runs give the same results and a killed sweep resumes from the cache.
``hydra.*`` overrides (``hydra.launcher.partition=gpu``) go to Hydra.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from madara_cli.composition.plugins import load_plugins
from madara_cli.config import load_grid, register_schemas
from madara_cli.config.folders import primary_and_searchpath
from madara_cli.config.overrides import parse_overrides
from madara_cli.core.errors import ConfigError

LAUNCHERS = {
    "basic": None,
    "joblib": "hydra_plugins.hydra_joblib_launcher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "ray": "hydra_plugins.hydra_ray_launcher",
}

# Launchers whose jobs may run on other nodes: each job writes its own cache shard
# (SQLite must not be shared over NFS), folded into the cache when the sweep ends.
CLUSTER = ("submitit_slurm", "submitit_local", "ray")

_POOL = None  # one engine pool per worker process: a model loads once per worker


def _launcher_choice() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    try:
        return HydraConfig.get().runtime.choices.get("hydra/launcher")
    except ValueError:  # not inside a Hydra job
        return None


def _task(cfg) -> None:
    """One Hydra job: cell ``madara_cell`` of the list in ``madara_cells``, composed as the serial run composes it."""
    global _POOL
    from madara_cli.composition import compose
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.runner import run_cell

    if _POOL is None:
        if _launcher_choice() in CLUSTER:
            from madara_cli.backends.shards import ShardedCache

            _POOL = EnginePool(cache_factory=ShardedCache)
        else:
            _POOL = EnginePool()
        # The pool outlives each job (the worker's next reuses the model), so no ``with`` fits: closed at
        # exit; a killed worker skips this and loses nothing (the cache commits every chunk).
        atexit.register(_POOL.close)
    cells = json.loads(Path(str(cfg.madara_cells)).read_text(encoding="utf-8"))
    load_plugins()  # this worker's own process: the shipped, installed and --include ($MADARA_INCLUDE) plugins
    run_cell(compose(cells[int(cfg.madara_cell)]), _POOL)


def job_overrides(grid_name: str, extra: list[str], launcher: str, n_jobs: int | None) -> list[list[str]]:
    """Every job's overrides: the serial run's cells exactly, plus threads per worker under joblib."""
    from madara_cli.experiment.grid import grid_overrides

    cell_extra = [o for o in parse_overrides(extra) if not o.is_hydra_setting]  # hydra.* goes to Hydra
    cells = grid_overrides(load_grid(grid_name), [o.raw for o in cell_extra])
    if launcher == "joblib" and n_jobs:
        # An engine taking every core by default (llama.cpp) gets its share per worker through the setting
        # its BackendSpec names (speed only: keys do not move); one elsewhere (vLLM, a server) has none.
        cells = [c + _worker_threads(c, n_jobs) for c in cells]
    return cells


def _worker_threads(cell: list[str], n_jobs: int) -> list[str]:
    from madara_cli.plugins.catalog import CATALOG

    given = parse_overrides(cell)
    names = [str(o.value) for o in given if o.key == "backend" and not o.prefix]
    setting = CATALOG.get("backend", names[-1] if names else _default_backend()).worker_threads
    if setting is None or any(o.key == f"backend.{setting}" and not o.prefix and o.value is not None for o in given):
        return []
    return [f"backend.{setting}={max(1, (os.cpu_count() or 1) // n_jobs)}"]


def _default_backend() -> str:
    from madara_cli.composition import compose

    return str(compose([]).backend.name)


def check_launcher(launcher: str) -> None:
    if launcher not in LAUNCHERS:
        raise ConfigError(f"unknown launcher '{launcher}'; valid launchers: {', '.join(LAUNCHERS)}")
    mod = LAUNCHERS[launcher]
    if mod:
        try:
            __import__(mod)
        except ImportError:
            pkg = mod.split(".")[-1].replace("_", "-")
            raise ConfigError(f"the {launcher} launcher needs the {pkg} plugin: pip install {pkg}") from None


def sweep_overrides(grid_name: str, extra: list[str], launcher: str, n_jobs: int | None, cells_file: str | Path, n_cells: int,
                    runs: str | Path) -> list[str]:
    """Hydra's command line for the sweep: a job per cell of ``cells_file`` (folders under ``runs``), the
    launcher and its settings, and ``extra``'s ``hydra.*`` overrides."""
    check_launcher(launcher)
    parsed = parse_overrides(extra)
    args = [f"+madara_cells={_hydra_value(cells_file)}", "+madara_cell=" + ",".join(str(i) for i in range(n_cells))]
    args += [o.raw for o in parsed if o.is_hydra_setting]
    args += [
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={_hydra_value(runs)}",
        "hydra.sweep.subdir=${hydra.job.num}",
        "hydra/job_logging=none",
        "hydra/hydra_logging=none",
    ]
    if launcher == "joblib" and n_jobs:
        args.append(f"hydra.launcher.n_jobs={n_jobs}")
    if launcher == "ray":
        given = {o.key for o in parsed if not o.deletes}
        init = "hydra.launcher.ray.init."
        if init + "address" not in given:
            # No cluster address: Ray starts a local one, bounded to n_jobs CPUs, on loopback.
            args += [
                f"+{init}num_cpus={n_jobs or os.cpu_count() or 1}",
                f"+{init}include_dashboard=false",
                f"+{init}_node_ip_address=127.0.0.1",
            ]
        if init + "object_store_memory" not in given:
            # The launcher would add this key itself, which a struct config refuses; an existing cluster gets null.
            args.append(f"+{init}object_store_memory=" + ("null" if init + "address" in given else "100000000"))
    return args


def _hydra_value(path: str | Path) -> str:
    """A path as one Hydra override value, quoted when it holds more than Hydra reads unquoted (a space, a comma, '=' ...)."""
    import re

    text = str(path)
    if re.fullmatch(r"[\w./\\:+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def write_cells_file(runs: Path, cells: list[list[str]]) -> Path:
    """The jobs' override lists beside the results, named by content (two sweeps of one grid do not clash)."""
    from madara_cli.core.paths import writing

    body = json.dumps(cells, indent=1, ensure_ascii=False) + "\n"
    path = runs / f"cells-{hashlib.sha256(body.encode()).hexdigest()[:12]}.json"
    with writing(path):
        runs.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(body, encoding="utf-8")
        tmp.replace(path)
    return path


def multirun(grid_name: str, extra: list[str], launcher: str = "joblib", n_jobs: int | None = None) -> list:
    """Run a grid as a Hydra multirun with ``launcher``; when every job ended, its cells' composed configs."""
    import hydra

    from madara_cli.composition import compose

    check_launcher(launcher)
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1):
        raise ConfigError(f"--jobs {n_jobs}: expected a number of parallel processes >= 1")
    cells = job_overrides(grid_name, extra, launcher, n_jobs)
    cfgs = [compose(c) for c in cells]  # every cell checked here, before any job starts
    from madara_cli.results.tracking import preflight

    preflight(cfgs)  # and every tracker they log to
    runs = jobs_folder(grid_name, extra)
    cells_file = write_cells_file(runs, cells)
    args = sweep_overrides(grid_name, extra, launcher, n_jobs, cells_file, len(cells), runs)
    cache = _cache_path(grid_name, extra) if launcher in CLUSTER else None
    if cache is not None:
        from madara_cli.backends.shards import checkpoint

        checkpoint(cache)  # the jobs read it as an immutable file
    if launcher == "ray":
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    register_schemas()
    # --config-dir folders go on Hydra's search path too: jobs compose from `madara run`'s options (workers inherit MADARA_CONFIG_DIR).
    primary, searchpath = primary_and_searchpath()
    main = hydra.main(config_path=primary, config_name="config", version_base="1.3")(_task)
    saved = sys.argv
    sys.argv = ["madara", "--multirun", *searchpath, *args]
    try:
        main()
    finally:
        sys.argv = saved
        if launcher == "ray":
            import ray

            if ray.is_initialized():
                ray.shutdown()
        if cache is not None:
            from madara_cli.backends.shards import merge_shards

            report = merge_shards(cache)
            for f in report.failed:  # kept on disk: `madara cache merge` retries them
                print(f"warning: cache shard not merged: {f}", file=sys.stderr)
    return cfgs


@dataclass(frozen=True)
class LaunchedCells:
    """What a launched grid left on disk: the finished cells (in grid order) and each unfinished one's ``model/benchmark/strategy``."""

    finished: list
    missing: list[str]


def read_back(cfgs: list) -> LaunchedCells:
    """The results of the cells :func:`multirun` launched, read back (an unfinished cell is reported, not run)."""
    from madara_cli.experiment.walk import finished_cell

    found = [(cfg, finished_cell(cfg, sized=True)) for cfg in cfgs]
    return LaunchedCells(
        finished=[r for _, r in found if r is not None],
        missing=[f"{c.model.name}/{c.benchmark.name}/{c.strategy.name}" for c, r in found if r is None],
    )


def jobs_folder(grid_name: str, extra: list[str]) -> Path:
    """Where the sweep's job folders (submitit's too) and cells file go: ``<results_dir>/.hydra/<grid>``."""
    from madara_cli.composition import compose
    from madara_cli.core.paths import inside

    given = [o.raw for o in parse_overrides([*load_grid(grid_name).overrides, *extra]) if o.key == "results_dir"]
    results_dir = Path(str(compose(given).results_dir)).resolve()
    return inside(results_dir, results_dir / ".hydra" / load_grid(grid_name).name)


def _cache_path(grid_name: str, extra: list[str]) -> Path:
    """The cache the sweep's jobs share (only ``results_dir`` and ``cache`` decide it)."""
    from madara_cli.composition import compose

    given = [o.raw for o in parse_overrides([*load_grid(grid_name).overrides, *extra]) if o.key in ("results_dir", "cache")]
    return Path(compose(given).cache)
