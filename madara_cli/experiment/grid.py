"""Grids: the cells of a grid or a sweep, composed. A cell is one (model, benchmark, strategy,
retriever, k, seed, limit) measurement; its identity (the key naming its folder, hashing exactly
what can change its numbers) is :func:`madara_cli.config.identity`'s, derived once per cell."""

from __future__ import annotations

import itertools
from typing import Callable

from madara_cli.composition import compose, ensure_loaded, load_plugins
from madara_cli.config import (
    GridConfig,
    chosen_strategy,
    inapplicable_strategy_overrides,
    load_grid,
    option_settings,
)
from madara_cli.config.identity import Cell, identify
from madara_cli.config.overrides import parse_overrides
from madara_cli.config.settings import Settings
from madara_cli.config.validate import not_applicable
from madara_cli.core.errors import ConfigError


def cell_from_cfg(cfg: Settings) -> Cell:
    """The cell a composed config runs (its names and hash), for a caller needing nothing else of :func:`identify`."""
    return identify(cfg).cell


def grid_overrides(grid: GridConfig, extra: list[str]) -> list[list[str]]:
    """Every cell's overrides: the axes' cross product, models outermost so a model's cells run back
    to back (it loads once); plug-ins load first (which strategy has which setting is theirs to say)."""
    ensure_loaded()
    axes = sorted(grid.axes.items(), key=lambda kv: (kv[0] != "model", kv[0]))
    fixed, swept = _split_sweeps(list(extra))
    names = [a for a, _ in axes] + [k for k, _ in swept]
    cells = []
    for combo in itertools.product(*[v for _, v in axes], *[v for _, v in swept]):
        cells.append([f"{n}={v}" for n, v in zip(names, combo)] + list(grid.overrides) + [f"grid_name={grid.name}"] + fixed)
    return _strategy_settings_where_they_apply(grid.name, cells)


def _strategy_settings_where_they_apply(grid_name: str, cells: list[list[str]]) -> list[list[str]]:
    """A grid-wide ``strategy.X=...`` goes to the cells whose strategy has X (``strategy.scoring=logprob``
    over [nf, sda] leaves nf alone); one fitting none of the grid's strategies is a single cell's
    one-line error. Cells that come out identical (a swept setting they lack) are kept once."""
    from madara_cli.config.folders import holding_files

    out: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()  # a set, not `in out`: a 10,000-cell grid compared every pair
    dropped_from: dict[str, set[str]] = {}
    kept_somewhere: set[str] = set()
    keys: dict[str, str] = {}
    # What a cell drops follows from its strategy and strategy.* overrides alone: worked out once a
    # pair (a 10,000-cell seed sweep asked 10,000 times, 2.5 s before its first cell composed).
    drops: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    with holding_files():  # each strategy option's schema looked up once, not once per cell
        for cell in cells:
            parsed = parse_overrides(cell)  # once per cell, for both questions below
            keys.update((o.raw, o.key) for o in parsed)
            strategy = chosen_strategy(parsed)
            asks = (strategy, tuple(o.raw for o in parsed if o.key.startswith("strategy")))
            if asks not in drops:
                drops[asks] = set(inapplicable_strategy_overrides(parsed))
            drop = drops[asks]
            for text in cell:
                if text in drop:
                    dropped_from.setdefault(text, set()).add(strategy)
                else:
                    kept_somewhere.add(text)
            kept = [o for o in cell if o not in drop]
            if tuple(kept) not in seen:
                seen.add(tuple(kept))
                out.append(kept)
    for text, strategies in dropped_from.items():
        if text not in kept_somewhere:
            key = keys[text]
            if len(strategies) == 1:
                (only,) = strategies
                raise ConfigError(not_applicable(key, only, option_settings(only)))
            raise ConfigError(f"{key} does not apply to any strategy of grid {grid_name} ({', '.join(sorted(strategies))})")
    return out


def _split_sweeps(overrides: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Hydra sweep overrides (``seed=0,1``) become extra axes; the rest apply to all."""
    from hydra.core.override_parser.types import Glob

    from madara_cli.config import GROUPS, options, plural, validate_overrides

    parsed = parse_overrides(overrides)
    validate_overrides(parsed)  # a malformed one: one line (a glob() is a sweep there, checked below)
    fixed, swept = [], []
    for text, o in ((p.raw, p.hydra) for p in parsed):
        if isinstance(o.value(), Glob):  # strategy=glob(pde*): Hydra's glob over the options of a group
            group = o.key_or_group
            if group not in GROUPS:
                raise ConfigError(f"'{text}': glob() picks options of a config group ({', '.join(GROUPS)}), and {group} is none")
            names = o.value().filter(options(group))
            if not names:
                raise ConfigError(f"'{text}' matches no {group}; valid {plural(group)}: {', '.join(options(group))}")
            swept.append((o.get_key_element(), names))
        elif o.is_sweep_override():
            if not o.is_discrete_sweep():  # interval(0,1): a range for an optimiser's sampler, not a list
                raise ConfigError(f"'{text}' is a continuous interval, which a grid cannot enumerate; "
                                  f"sweep values with range(start,stop[,step]) or a,b,c")
            swept.append((o.get_key_element(), list(o.sweep_string_iterator())))
        else:
            fixed.append(text)
    return fixed, swept


def _composed(cells: list[list[str]], progress: Callable[[int, int], None] | None) -> list[Settings]:
    """Each cell composed (Hydra's defaults step once per distinct group choices), ``progress(done, total)`` after each."""
    from madara_cli.composition.compose import held_state

    out = []
    with held_state():  # the config files' stamps are read once for the grid
        for i, o in enumerate(cells, 1):
            out.append(compose(o))
            if progress is not None:
                progress(i, len(cells))
    return out


def grid_cells(grid_name: str, extra: list[str] | None = None, axes: dict[str, list[str]] | None = None) -> list[list[str]]:
    """Every cell's overrides, not yet composed; ``axes`` replaces whole axes (e.g. the models)."""
    load_plugins()
    grid = load_grid(grid_name)
    if axes:
        grid.axes = {**grid.axes, **axes}
    return grid_overrides(grid, list(extra or []))


def expand(grid_name: str, extra: list[str] | None = None, axes: dict[str, list[str]] | None = None,
           progress: Callable[[int, int], None] | None = None) -> list[Settings]:
    """Composed configs of every cell; ``axes`` replaces whole axes (e.g. the models)."""
    return _composed(grid_cells(grid_name, extra, axes), progress)


def has_sweep(overrides: list[str]) -> bool:
    """Whether any override sweeps (``key=a,b``, ``key=range(...)``)."""
    return bool(_split_sweeps(list(overrides))[1])


def sweep_cells(overrides: list[str]) -> tuple[str, list[list[str]]]:
    """``madara run -m key=a,b ...``: the ad-hoc grid's name (``adhoc`` unless ``grid_name=``; its cells
    go to ``results/<grid_name>/``) and every cell's overrides, the sweeps' cross product."""
    load_plugins()
    fixed, _ = _split_sweeps(list(overrides))
    name = next((o.value for o in parse_overrides(fixed) if o.key == "grid_name" and not o.prefix and o.value is not None), "adhoc")
    return str(name), grid_overrides(GridConfig(name=name), list(overrides))


def expand_sweep(overrides: list[str], progress: Callable[[int, int], None] | None = None) -> list[Settings]:
    """``madara run -m key=a,b ...``: the sweeps' cross product, composed (:func:`sweep_cells`)."""
    return _composed(sweep_cells(overrides)[1], progress)
