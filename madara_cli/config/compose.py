"""Composing a run's config: where configs are found (the shipped ones, ``--config-dir``
folders), override checks, :func:`compose` and :func:`load_grid`.

``configs/config.yaml`` starts its defaults list with ``base_config`` (the
:class:`~madara_cli.config.schema.RootConfig` schema), and each
``configs/strategy/<name>.yaml`` with ``<name>_schema`` (that strategy's own
schema), so composition validates every group option and every choice (Enum)
setting; :mod:`madara_cli.config.validate` checks overrides first and ranges after.
The composed config holds plain strings for the choices.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from madara_cli.config.overrides import Override, malformed, parse_overrides
from madara_cli.config.schema import (
    GROUPS,
    SCHEMA_SUFFIX,
    STRATEGY_SCHEMAS,
    ConfigError,
    GridConfig,
    GridKind,
    RootConfig,
    StrategyConfig,
    plural,
    register_schemas,
    strategy_schema,
)


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


def read_yaml(path: Path) -> Any:
    """A config file's YAML; a syntax error, a tag (``!!python/object``: configs are
    data, and a tag is never constructed) or a byte that is not UTF-8 is one line
    naming the file and where."""
    import yaml

    from madara_cli.paths import utf8_error

    try:
        return OmegaConf.load(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or getattr(e, "context", None) or e).split())
        hint = " (YAML tags are refused: a config holds data, never objects)" if "tag" in problem else ""
        raise ConfigError(f"{path}: {where}{problem}{hint}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text: {utf8_error(path) or 'undecodable bytes'}") from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {_first_lines(e)}") from None


_CHECKED_DIRS: set[str] = set()


def _check_user_configs(d: Path) -> None:
    """Read every YAML file of a ``--config-dir`` folder once, so a broken one is named
    (file and line) before Hydra meets it halfway through composing."""
    if str(d) in _CHECKED_DIRS:
        return
    for f in sorted([*d.glob("*.yaml"), *d.glob("*/*.yaml")]):
        read_yaml(f)
    _CHECKED_DIRS.add(str(d))


def user_config_dirs() -> list[Path]:
    """Folders added with ``--config-dir DIR`` (``$MADARA_CONFIG_DIR``, ``os.pathsep``-separated),
    searched before the shipped configs: their group options add to or replace the shipped ones."""
    dirs = [Path(p).expanduser() for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"--config-dir {d}: no such folder")
        _check_user_configs(d)
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


def default_strategy() -> str:
    """The strategy option the root ``config.yaml``'s defaults list picks."""
    root = next(d for d in search_dirs() if (d / "config.yaml").is_file()) / "config.yaml"
    for entry in read_yaml(root).get("defaults", []):
        if isinstance(entry, DictConfig) and "strategy" in entry:
            return str(entry["strategy"])
    raise ConfigError(f"{root}: its defaults list picks no strategy")


def chosen_strategy(overrides: list[str] | list[Override]) -> str:
    """The strategy option of a cell: its last ``strategy=NAME``, else the default."""
    chosen = None
    for o in parse_overrides(overrides):
        h = o.hydra
        if h is not None and h.key_or_group == "strategy" and not h.is_sweep_override() and not h.package:
            chosen = str(h.value())
    return chosen or default_strategy()


def _option_yaml(option: str) -> DictConfig | None:
    path = find_config("strategy", option)
    if path is None:
        return None
    node = read_yaml(path)
    return node if isinstance(node, DictConfig) else None


def _schema_default(node: DictConfig) -> str | None:
    """The ``<name>_schema`` entry of a strategy yaml's defaults list, if it has one."""
    for entry in node.get("defaults", []):
        if isinstance(entry, str) and entry.endswith(SCHEMA_SUFFIX) and entry[: -len(SCHEMA_SUFFIX)] in STRATEGY_SCHEMAS:
            return entry[: -len(SCHEMA_SUFFIX)]
    return None


def option_schema(option: str) -> type[StrategyConfig] | None:
    """The schema of strategy option ``option`` (a ``configs/strategy/<option>.yaml``):
    the one its defaults list names, else the one of the strategy its ``name`` runs
    (a user config without a defaults list); None for a strategy madara does not ship."""
    node = _option_yaml(option)
    if node is None:
        return strategy_schema(option)
    named = _schema_default(node)
    return strategy_schema(named if named else str(node.get("name", option)))


def option_settings(option: str) -> list[str]:
    """The settings strategy option ``option`` reads (``name`` first)."""
    schema = option_schema(option)
    return list(schema.__dataclass_fields__) if schema else ["name"]


def strategy_node(option: str) -> DictConfig:
    """Strategy option ``option``'s settings as a composed config would hold them (its
    schema's defaults and its yaml), plain strings for the choices."""
    return compose([f"strategy={option}"]).strategy


def inapplicable_strategy_overrides(overrides: list[str] | list[Override]) -> list[str]:
    """The ``strategy.X=...`` overrides whose setting X the cell's strategy lacks but
    another strategy has (a misspelt X is not one: compose names it)."""
    parsed = parse_overrides(overrides)
    schema = option_schema(chosen_strategy(parsed))
    if schema is None:
        return []
    known = {f for s in STRATEGY_SCHEMAS.values() for f in s.__dataclass_fields__}
    out = []
    for o in parsed:
        if o.hydra is None:
            continue
        parts = o.hydra.key_or_group.split(".")
        if o.hydra.package or parts[0] != "strategy" or len(parts) != 2:
            continue
        if parts[1] in known and parts[1] not in schema.__dataclass_fields__:
            out.append(o.raw)
    return out


def validate_overrides(overrides: list[str] | list[Override]) -> None:
    """Fail with one line on a malformed override or an unknown group option."""
    parsed = parse_overrides(overrides)
    bad = malformed(parsed)
    if bad is not None:
        raise ConfigError(f"malformed override: {bad.error}")
    for o in (p.hydra for p in parsed):
        key = o.key_or_group
        if key == "grid":
            raise ConfigError("run a grid with --grid NAME; valid grids: " + ", ".join(options("grid")))
        if key in (*GROUPS, "logger") and not o.is_sweep_override():
            value = o.value()
            valid = options(key)
            if value not in valid:
                raise ConfigError(f"unknown {key} '{value}'; valid {plural(key)}: {', '.join(valid)}")


def _no_sweeps(overrides: list[Override]) -> None:
    """One config at a time: a sweep (``key=a,b``) here gets a hint instead of Hydra's
    multi-line "Ambiguous value"."""
    for o in overrides:
        if o.hydra.is_sweep_override():
            raise ConfigError(f"'{o.raw}' is a sweep: run it with madara run -m {o.raw} (or --grid); for a list value write {o.hydra.key_or_group}=[...]")


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


def _force_add_strategy_settings(overrides: list[Override], option: str) -> list[str]:
    """A user strategy yaml without a ``<name>_schema`` defaults entry composes as a
    free node holding only its own keys; its schema is laid over it after
    composition, so an override of a schema setting the yaml leaves out is passed as
    ``++strategy.X`` (set or add) instead of failing as an unknown key."""
    node = _option_yaml(option)
    if node is None or _schema_default(node) is not None or option_schema(option) is None:
        return [o.raw for o in overrides]
    out = []
    for o in overrides:
        h = o.hydra
        plain = not (h.package or h.is_add() or h.is_force_add() or h.is_delete())
        out.append("++" + o.raw if plain and h.key_or_group.startswith("strategy.") else o.raw)
    return out


def _typed_strategy(cfg: DictConfig, option: str) -> None:
    """Lay the strategy's schema over a node composed without it (see above)."""
    if OmegaConf.get_type(cfg.strategy) is not dict:
        return
    schema = option_schema(option)
    if schema is None:
        return
    settings = list(schema.__dataclass_fields__)
    extra = [k for k in cfg.strategy if k not in settings]
    if extra:
        raise ConfigError(f"strategy {option}: strategy.{extra[0]} does not apply to strategy {cfg.strategy.get('name', option)}; "
                          f"its settings: {', '.join(settings)}")
    try:
        cfg.strategy = OmegaConf.merge(OmegaConf.structured(schema), cfg.strategy)
    except OmegaConfBaseException as e:
        raise ConfigError(f"strategy {option}: strategy.{getattr(e, 'key', '?')}: {_first_lines(e)}") from None


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``configs/config.yaml`` with Hydra overrides, validated and resolved;
    choice settings come back as plain strings."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from madara_cli.config.validate import check_override_types, validate_config

    overrides = list(overrides or [])
    parsed = parse_overrides(overrides)  # once: every check below reads these records
    validate_overrides(parsed)
    option = chosen_strategy(parsed)
    check_override_types(parsed, RootConfig, ConfigError, strategy=(option, option_schema(option)))
    _no_sweeps(parsed)
    register_schemas()
    GlobalHydra.instance().clear()
    try:
        primary, extra = primary_and_searchpath()
        with initialize_config_dir(config_dir=primary, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[*extra, *_force_add_strategy_settings(parsed, option)])
        _typed_strategy(cfg, option)
        OmegaConf.resolve(cfg)
        cfg.overrides = list(overrides)
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, enum_to_str=True))
        OmegaConf.set_struct(cfg, True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad config: {_first_lines(e)} (keys: {', '.join(RootConfig.__dataclass_fields__)})") from None
    validate_config(cfg, ConfigError)  # ranges, before any data or model loads
    return cfg


def _first_lines(e: Exception) -> str:
    """Hydra's message on one line: its first line, and the next when the first only
    says where ("In 'strategy/x': ValidationError raised while composing config:")."""
    lines = [" ".join(x.split()) for x in str(e).split("\n") if x.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else type(e).__name__


def load_grid(name: str) -> GridConfig:
    from madara_cli.paths import check_name

    check_name("--grid", name, ConfigError)
    path = find_config("grid", name)
    if path is None:
        raise ConfigError(f"unknown grid '{name}'; valid grids: {', '.join(options('grid'))}")
    raw = read_yaml(path)
    try:
        kind = str(raw.get("kind", GridKind.cells)) if isinstance(raw, DictConfig) else str(GridKind.cells)
        merged = OmegaConf.merge(OmegaConf.structured(GridConfig), raw) if kind in GridKind.__members__ else None
    except Exception as e:  # noqa: BLE001 - any YAML/schema error is the user's to fix
        raise ConfigError(f"bad grid {path.name}: {' '.join(str(e).split())}") from None
    if merged is None:
        raise ConfigError(f"grid {name}: unknown kind '{kind}'; valid kinds: {', '.join(GridKind.__members__)}")
    grid: GridConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    check_name(f"grid {path.name}: name", grid.name, ConfigError)
    for group, values in grid.axes.items():
        if group not in GROUPS:
            raise ConfigError(f"grid {name}: unknown axis '{group}'; valid axes: {', '.join(GROUPS)}")
        bad = [v for v in values if v not in options(group)]
        if bad:
            raise ConfigError(f"grid {name}: unknown {group} {bad}; valid: {', '.join(options(group))}")
    return grid


def paper_grids() -> list[str]:
    """The grids ``madara reproduce`` runs: every grid whose ``produces:`` names a paper
    table, in run order: probe grids first (the routed ``madara`` cells reuse their
    probes), then ``tableN`` grids by N, then the rest by name."""
    import re

    grids = [load_grid(g) for g in options("grid")]

    def order(g: GridConfig) -> tuple:
        m = re.fullmatch(r"table(\d+)", g.name)
        return (g.kind != "probes", m is None, int(m.group(1)) if m else 0, g.name)

    return [g.name for g in sorted((g for g in grids if g.produces), key=order)]


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
