"""Grid cells through Hydra's multirun and its launcher plugins.

``madara run --grid G --launcher joblib`` (or ``-m hydra/launcher=joblib`` style
overrides after ``--launcher``) turns the grid's axes into a Hydra sweep
(``strategy=nf,pde,...``) and hands it to Hydra: ``joblib`` runs cells in parallel
processes on this machine, ``submitit_slurm`` submits them to SLURM, ``ray`` to a Ray
cluster. Every job runs exactly :func:`madara_cli.runner.run_cell`, writes the same
results folder and shares the same SQLite response cache, so parallel and serial
runs produce the same results and a killed sweep resumes from the cache.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from madara_cli.config import ConfigError, config_dir, load_grid, register_schemas, validate_overrides

LAUNCHERS = {
    "basic": None,
    "joblib": "hydra_plugins.hydra_joblib_launcher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher",
    "ray": "hydra_plugins.hydra_ray_launcher",
}

_POOL = None  # one engine pool per worker process: a model loads once per worker


def _task(cfg) -> None:
    global _POOL
    from madara_cli.runner import EnginePool, run_cell

    if _POOL is None:
        _POOL = EnginePool()
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
    runs = Path(next((e.split("=", 1)[1] for e in reversed(extra) if e.startswith("results_dir=")), "results")) / ".hydra" / grid.name
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
    return args


def multirun(grid_name: str, extra: list[str], launcher: str = "joblib", n_jobs: int | None = None) -> None:
    """Run a grid as a Hydra multirun with ``launcher``; returns when every job ended."""
    import hydra

    args = sweep_overrides(grid_name, extra, launcher, n_jobs)
    register_schemas()
    main = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(_task)
    saved = sys.argv
    sys.argv = ["madara", "--multirun", *args]
    try:
        main()
    finally:
        sys.argv = saved
