"""Grids and cells.

A cell is one (model, benchmark, strategy, retriever, k, seed, limit) measurement.
Its canonical ``key`` names its results folder; the key ends with a short hash of
every other setting that can change the numbers (strategy parameters, generation
lengths, backend), so a changed setting never silently reuses old results.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from madara_cli.config import GridConfig, compose, hash_neutral, load_grid, to_plain

# Settings that say where things go, not what is measured.
_NOT_SEMANTIC = ("results_dir", "cache", "force", "grid_name", "log_samples", "overrides")


@dataclass(frozen=True)
class Cell:
    grid: str
    model: str
    benchmark: str
    strategy: str
    retriever: str
    k: int
    seed: int
    limit: int | None
    config_hash: str

    @property
    def key(self) -> str:
        n = "all" if self.limit is None else str(self.limit)
        return f"{self.model}__{self.benchmark}__{self.strategy}__{self.retriever}-k{self.k}__n{n}__s{self.seed}__{self.config_hash}"

    def to_dict(self) -> dict:
        return {
            "grid": self.grid, "model": self.model, "benchmark": self.benchmark, "strategy": self.strategy,
            "retriever": self.retriever, "k": self.k, "seed": self.seed, "limit": self.limit, "key": self.key,
        }

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> "Cell":
        semantic = hash_neutral({k: v for k, v in to_plain(cfg).items() if k not in _NOT_SEMANTIC})
        digest = hashlib.sha256(json.dumps(semantic, sort_keys=True).encode()).hexdigest()[:8]
        return cls(
            grid=cfg.grid_name, model=cfg.model.name, benchmark=cfg.benchmark.name, strategy=cfg.strategy.name,
            retriever=cfg.retriever.name, k=int(cfg.retriever.k), seed=int(cfg.seed), limit=cfg.limit, config_hash=digest,
        )

    def folder(self, results_dir: str | Path) -> Path:
        return Path(results_dir) / self.grid / self.key


def grid_overrides(grid: GridConfig, extra: list[str]) -> list[list[str]]:
    """The override list of every cell: the cross product of the axes, models
    outermost so that cells sharing a model run back to back (the model loads once)."""
    axes = sorted(grid.axes.items(), key=lambda kv: (kv[0] != "model", kv[0]))
    fixed, swept = _split_sweeps(list(extra))
    names = [a for a, _ in axes] + [k for k, _ in swept]
    cells = []
    for combo in itertools.product(*[v for _, v in axes], *[v for _, v in swept]):
        cells.append([f"{n}={v}" for n, v in zip(names, combo)] + list(grid.overrides) + [f"grid_name={grid.name}"] + fixed)
    return cells


def _split_sweeps(overrides: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Hydra sweep overrides (``seed=0,1``) become extra axes; the rest apply to all."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from madara_cli.config import validate_overrides

    validate_overrides(overrides)
    fixed, swept = [], []
    for text, o in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if o.is_sweep_override():
            swept.append((o.get_key_element(), list(o.sweep_string_iterator())))
        else:
            fixed.append(text)
    return fixed, swept


def expand(grid_name: str, extra: list[str] | None = None, axes: dict[str, list[str]] | None = None) -> list[DictConfig]:
    """Composed configs of every cell; ``axes`` replaces whole axes (e.g. the models)."""
    grid = load_grid(grid_name)
    if axes:
        grid.axes = {**grid.axes, **axes}
    return [compose(o) for o in grid_overrides(grid, list(extra or []))]


def has_sweep(overrides: list[str]) -> bool:
    """Whether any override sweeps (``key=a,b``, ``key=range(...)``)."""
    return bool(_split_sweeps(list(overrides))[1])


def expand_sweep(overrides: list[str]) -> list[DictConfig]:
    """``madara run -m key=a,b ...``: the cross product of the sweeps as an ad-hoc grid
    (``results/<grid_name>/``, ``adhoc`` unless ``grid_name=`` says otherwise)."""
    fixed, _ = _split_sweeps(list(overrides))
    name = next((o.split("=", 1)[1] for o in fixed if o.startswith("grid_name=")), "adhoc")
    return [compose(o) for o in grid_overrides(GridConfig(name=name), list(overrides))]
