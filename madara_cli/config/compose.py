"""Composing a run's config: where configs are found (the shipped ones, ``--config-dir``
folders), override checks, :func:`compose` and :func:`load_grid`.

``configs/config.yaml`` starts its defaults list with ``base_config`` (the
:class:`~madara_cli.config.schema.RootConfig` schema), so composition validates
every group option; :mod:`madara_cli.config.validate` then checks ranges and choices.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from madara_cli.config.schema import GROUPS, ConfigError, GridConfig, RootConfig, plural, register_schemas


def _packaged_configs() -> Path | None:
    """The copy of ``configs/`` that ships inside the wheel (``madara_cli/configs``)."""
    from importlib.resources import files

    try:
        d = Path(str(files("madara_cli") / "configs"))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - zipped installs
        return None
    return d if (d / "config.yaml").is_file() else None


def config_dir() -> Path:
    """The shipped configs, first of: ``$MADARA_CONFIGS``, the checkout's ``configs/``
    (editable installs, ``PYTHONPATH=.``), the copy packaged in the wheel."""
    env = os.environ.get("MADARA_CONFIGS")
    if env:
        d = Path(env).expanduser()
        if not (d / "config.yaml").is_file():
            raise ConfigError(f"MADARA_CONFIGS={env} has no config.yaml (point it at a configs/ folder)")
        return d
    checkout = Path(__file__).resolve().parents[2] / "configs"
    if (checkout / "config.yaml").is_file():
        return checkout
    packaged = _packaged_configs()
    if packaged is None:
        raise ConfigError(f"no configs found at {checkout} nor in the installed package (set MADARA_CONFIGS to a configs/ folder)")
    return packaged


def user_config_dirs() -> list[Path]:
    """Folders added with ``--config-dir DIR`` (``$MADARA_CONFIG_DIR``, ``os.pathsep``-separated),
    searched before the shipped configs: their group options add to or replace the shipped ones."""
    dirs = [Path(p).expanduser() for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"--config-dir {d}: no such folder")
    return dirs


def add_config_dir(path: str | Path) -> None:
    """``--config-dir DIR``: kept in the environment so launcher workers see it too."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise ConfigError(f"--config-dir {path}: no such folder")
    current = [p for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p]
    os.environ["MADARA_CONFIG_DIR"] = os.pathsep.join([*current, str(d)])


def search_dirs() -> list[Path]:
    """User config folders first, then the shipped configs."""
    return [*user_config_dirs(), config_dir()]


def find_config(group: str, name: str) -> Path | None:
    """``<group>/<name>.yaml`` from the first search folder that has it."""
    for d in search_dirs():
        if (d / group / f"{name}.yaml").is_file():
            return d / group / f"{name}.yaml"
    return None


def options(group: str) -> list[str]:
    return sorted({p.stem for d in search_dirs() if (d / group).is_dir() for p in (d / group).glob("*.yaml")})


def validate_overrides(overrides: list[str]) -> None:
    """Fail with one line on a malformed override or an unknown group option."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:  # OverrideParseException and friends
        first = str(e).strip().splitlines()[0]
        raise ConfigError(f"malformed override: {first}") from None
    for o in parsed:
        key = o.key_or_group
        if key == "grid":
            raise ConfigError("run a grid with --grid NAME; valid grids: " + ", ".join(options("grid")))
        if key in GROUPS and not o.is_sweep_override():
            value = o.value()
            valid = options(key)
            if value not in valid:
                raise ConfigError(f"unknown {key} '{value}'; valid {plural(key)}: {', '.join(valid)}")


def _no_sweeps(overrides: list[str]) -> None:
    """One config at a time: a sweep (``key=a,b``) here gets a hint instead of Hydra's
    multi-line "Ambiguous value"."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for text, o in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if o.is_sweep_override():
            raise ConfigError(f"'{text}' is a sweep: run it with madara run -m {text} (or --grid); for a list value write {o.key_or_group}=[...]")


_PRIMARY_COPIES: dict[str, str] = {}


def primary_and_searchpath() -> tuple[str, list[str]]:
    """Hydra's primary config folder and the ``hydra.searchpath`` override that puts the
    ``--config-dir`` folders ahead of the shipped configs. Hydra remembers a primary
    config it did not find before the search path grew, so with user folders the
    primary is a scratch folder holding only the first ``config.yaml`` found."""
    users = user_config_dirs()
    if not users:
        return str(config_dir().resolve()), []
    root = next(d for d in search_dirs() if (d / "config.yaml").is_file()) / "config.yaml"
    key = str(root.resolve())
    if key not in _PRIMARY_COPIES or not Path(_PRIMARY_COPIES[key], "config.yaml").is_file():
        import tempfile

        tmp = tempfile.mkdtemp(prefix="madara-configs-")
        Path(tmp, "config.yaml").write_text(root.read_text(encoding="utf-8"), encoding="utf-8")
        _PRIMARY_COPIES[key] = tmp
    paths = ",".join("file://" + str(d.resolve()) for d in search_dirs())
    return _PRIMARY_COPIES[key], [f"hydra.searchpath=[{paths}]"]


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``configs/config.yaml`` with Hydra overrides, validated and resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from madara_cli.config.validate import check_override_types, validate_config

    overrides = list(overrides or [])
    validate_overrides(overrides)
    check_override_types(overrides, RootConfig, ConfigError)
    _no_sweeps(overrides)
    register_schemas()
    GlobalHydra.instance().clear()
    try:
        primary, extra = primary_and_searchpath()
        with initialize_config_dir(config_dir=primary, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[*extra, *overrides])
        OmegaConf.resolve(cfg)
        cfg.overrides = list(overrides)
    except (HydraException, OmegaConfBaseException) as e:
        msg = " ".join(str(e).split("\n")[0].split())
        raise ConfigError(f"bad config: {msg} (keys: {', '.join(RootConfig.__dataclass_fields__)})") from None
    validate_config(cfg, ConfigError)  # ranges and choices, before any data or model loads
    return cfg


def load_grid(name: str) -> GridConfig:
    path = find_config("grid", name)
    if path is None:
        raise ConfigError(f"unknown grid '{name}'; valid grids: {', '.join(options('grid'))}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(GridConfig), OmegaConf.load(path))
    except Exception as e:  # noqa: BLE001 - any YAML/schema error is the user's to fix
        raise ConfigError(f"bad grid {path.name}: {' '.join(str(e).split())}") from None
    grid: GridConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    if grid.kind not in ("cells", "probes"):
        raise ConfigError(f"grid {name}: unknown kind '{grid.kind}'; valid kinds: cells, probes")
    for group, values in grid.axes.items():
        if group not in GROUPS:
            raise ConfigError(f"grid {name}: unknown axis '{group}'; valid axes: {', '.join(GROUPS)}")
        bad = [v for v in values if v not in options(group)]
        if bad:
            raise ConfigError(f"grid {name}: unknown {group} {bad}; valid: {', '.join(options(group))}")
    return grid


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
