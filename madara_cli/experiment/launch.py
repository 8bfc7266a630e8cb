"""Grid cells through Hydra's multirun and its launcher plugins.

``madara run --grid G --launcher joblib`` (or ``-m hydra/launcher=joblib`` style
overrides after ``--launcher``) turns the grid's axes into a Hydra sweep
(``strategy=nf,pde,...``) and hands it to Hydra: ``joblib`` runs cells in parallel
processes on this machine, ``submitit_slurm`` submits them to SLURM, ``ray`` to a Ray
cluster. Every job runs exactly :func:`madara_cli.experiment.runner.run_cell`, writes the same
results folder and shares the same SQLite response cache, so parallel and serial
runs produce the same results and a killed sweep resumes from the cache.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

from madara_cli.config import ConfigError, load_grid, register_schemas, validate_overrides
from madara_cli.config.compose import primary_and_searchpath

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
    global _POOL
    from madara_cli.experiment.runner import EnginePool, run_cell

    if _POOL is None:
        if _launcher_choice() in CLUSTER:
            from madara_cli.backends.shards import ShardedCache

            _POOL = EnginePool(cache_factory=ShardedCache)
        else:
            _POOL = EnginePool()
        # The pool outlives each job (the next job of this worker reuses the loaded
        # model), so no ``with`` block fits; it is closed when the worker exits.
        # A killed worker skips this, and loses nothing: the cache commits every chunk.
        atexit.register(_POOL.close)
    run_cell(cfg, _POOL)


def sweep_overrides(grid_name: str, extra: list[str], launcher: str, n_jobs: int | None) -> list[str]:
    grid = load_grid(grid_name)
    if launcher not in LAUNCHERS:
        raise ConfigError(f"unknown launcher '{launcher}'; valid launchers: {', '.join(LAUNCHERS)}")
    mod = LAUNCHERS[launcher]
    if mod:
        try:
            __import__(mod)
        except ImportError:
            pkg = mod.split(".")[-1].replace("_", "-")
            raise ConfigError(f"the {launcher} launcher needs the {pkg} plugin: pip install {pkg}") from None
    validate_overrides(list(grid.overrides) + list(extra))
    args = [f"{axis}={','.join(values)}" for axis, values in grid.axes.items()]
    args += list(grid.overrides) + [f"grid_name={grid.name}"] + list(extra)
    runs = "${results_dir}/.hydra/" + grid.name  # job folders (submitit's too) beside the results
    args += [
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={runs}",
        "hydra.sweep.subdir=${hydra.job.num}",
        "hydra/job_logging=none",
        "hydra/hydra_logging=none",
    ]
    if launcher == "joblib" and n_jobs:
        args.append(f"hydra.launcher.n_jobs={n_jobs}")
        if not any(e.startswith("backend.n_threads=") for e in extra):
            # llama.cpp takes every core by default: split them between the workers.
            args.append(f"backend.n_threads={max(1, (os.cpu_count() or 1) // n_jobs)}")
    if launcher == "ray":
        given = {e.lstrip("+").split("=", 1)[0] for e in extra}
        init = "hydra.launcher.ray.init."
        if init + "address" not in given:
            # No cluster address: Ray starts a local one, bounded to n_jobs CPUs, on loopback.
            args += [
                f"+{init}num_cpus={n_jobs or os.cpu_count() or 1}",
                f"+{init}include_dashboard=false",
                f"+{init}_node_ip_address=127.0.0.1",
            ]
        if init + "object_store_memory" not in given:
            # The launcher would add this key itself, which a struct config refuses; an
            # existing cluster must not be given one at all (null).
            args.append(f"+{init}object_store_memory=" + ("null" if init + "address" in given else "100000000"))
    return args


def multirun(grid_name: str, extra: list[str], launcher: str = "joblib", n_jobs: int | None = None) -> None:
    """Run a grid as a Hydra multirun with ``launcher``; returns when every job ended."""
    import hydra

    args = sweep_overrides(grid_name, extra, launcher, n_jobs)
    cache = _cache_path(grid_name, extra) if launcher in CLUSTER else None
    if cache is not None:
        from madara_cli.backends.shards import checkpoint

        checkpoint(cache)  # the jobs read it as an immutable file
    if launcher == "ray":
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    register_schemas()
    # --config-dir folders go on Hydra's search path here too, so the sweep composes each
    # job from the same options `madara run` sees (the workers inherit MADARA_CONFIG_DIR).
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


def _cache_path(grid_name: str, extra: list[str]) -> Path:
    """The cache the sweep's jobs share (only ``results_dir`` and ``cache`` decide it)."""
    from madara_cli.config import compose

    given = [o for o in list(load_grid(grid_name).overrides) + list(extra) if o.split("=", 1)[0].lstrip("+~") in ("results_dir", "cache")]
    return Path(compose(given).cache)
