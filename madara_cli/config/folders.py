"""Where configs are found (shipped, ``--config-dir``), each group's options and their schemas,
plug-in-free override checks, prompt sets and grids; composing is one layer up
(:func:`madara_cli.composition.compose`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from madara_cli.config import plugin_schemas as plugins
from madara_cli.config.overrides import Override, malformed, parse_overrides
from madara_cli.config.prompt_sets import SHIPPED, PromptSet, load_prompt_set, prompt_set_names
from madara_cli.config.schema import (
    GROUPS,
    SCHEMA_SUFFIX,
    GridConfig,
    GridKind,
    StrategyConfig,
    plural,
    strategy_schema,
)
from madara_cli.core.errors import ConfigError
from madara_cli.core.held import held, held_key, hold, holding_files, is_held  # noqa: F401  (holding_files: re-exported)
from madara_cli.plugins.catalog import CATALOG


def _packaged_configs() -> Path | None:
    """The copy of ``configs/`` that ships inside the wheel (``madara_cli/configs``)."""
    from importlib.resources import files

    try:
        d = Path(str(files("madara_cli") / "configs"))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - zipped installs
        return None
    return d if (d / "config.yaml").is_file() else None


@held
def config_dir() -> Path:
    """The shipped configs: ``$MADARA_CONFIGS``, else the checkout's ``configs/`` (editable, ``PYTHONPATH=.``), else the wheel's."""
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


# a config is a few KiB; a larger one is refused unread (a 20 MB file took minutes and gigabytes to parse)
MAX_CONFIG_BYTES = 1 << 20


def read_yaml(path: Path) -> Any:
    """A config file's YAML as plain data (:func:`madara_cli.core.sidefiles.yaml_problem`); a syntax
    error, tag (never constructed), alias, non-UTF-8 byte, resolver or non-key ``api_key_env``
    (:func:`madara_cli.core.credentials.resolver_problem`) is one line naming the file and where."""
    from madara_cli.core.credentials import resolver_problem
    from madara_cli.core.sidefiles import read_text, yaml_problem

    value, problem = yaml_problem(read_text(path, "the config", ConfigError, MAX_CONFIG_BYTES))
    if problem is None:
        problem = resolver_problem(value)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    if value is not None and not isinstance(value, (dict, list)):
        raise ConfigError(f"{path}: holds a {type(value).__name__}, not a mapping of settings")
    try:
        return OmegaConf.create(value if value is not None else {})
    except OmegaConfBaseException as e:
        raise ConfigError(f"{path}: {_first_lines(e)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None


# read_yaml's nodes by stamp, for the root config.yaml and chosen options' yaml: a 10,000-cell grid reads each once
_READ: dict[tuple, Any] = {}
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within its stamp's resolution


def read_yaml_once(path: Path) -> Any:
    """:func:`read_yaml` once per unchanged file (device, inode, size, mtime, ctime ns; one changed in
    the last two seconds is read every time); the shared node is read-only."""
    import time

    try:
        st = path.stat()
    except OSError:
        return read_yaml(path)  # read_yaml names the file and what is wrong
    stamp = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS:
        return read_yaml(path)
    if stamp not in _READ:
        node = read_yaml(path)
        if isinstance(node, (DictConfig, ListConfig)):
            OmegaConf.set_readonly(node, True)
        _READ[stamp] = node
    return _READ[stamp]


@held
def _regular(path: Path) -> bool:
    """``path`` is a regular file (or a link to one); a FIFO, socket or folder ``*.yaml`` is no option (a FIFO blocks)."""
    import stat

    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


@held
def _not_regular(group: str, name: str) -> Path | None:
    """The ``<group>/<name>.yaml`` of a search folder that exists but is not a regular file."""
    for d in search_dirs():
        p = d / group / f"{name}.yaml"
        if (p.exists() or p.is_symlink()) and not _regular(p):
            return p
    return None


def user_config_dirs() -> list[Path]:
    """``--config-dir`` folders (``$MADARA_CONFIG_DIR``, ``os.pathsep``-separated), searched before the
    shipped configs, adding or replacing options; unread here (:func:`check_selected` parses only what is selected)."""
    dirs = [Path(p).expanduser() for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"--config-dir {d}: no such folder")
    return dirs


def _in_user_dir(path: Path, users: list[Path]) -> bool:
    return any(path.parent.parent == d or path.parent == d for d in users)


def _default_entries(node: Any, group: str) -> list[tuple[str, str]]:
    """The (group, option) files a defaults list names (``group: option``, ``/group/option``,
    ``group/option``, a bare name in its own group; a ConfigStore schema is simply not found)."""
    out: list[tuple[str, str]] = []
    entries = node.get("defaults", []) if isinstance(node, DictConfig) else []
    for entry in entries if isinstance(entries, (list, ListConfig)) else []:
        if isinstance(entry, (dict, DictConfig)):
            for key, value in entry.items():
                key = str(key).split()[-1].lstrip("/").split("@")[0]
                if isinstance(value, str) and key:
                    out.append((key, value))
        elif isinstance(entry, str) and entry != "_self_":
            path = entry.split("@")[0].lstrip("/")
            out.append(tuple(path.rsplit("/", 1)) if "/" in path else (group, path))  # type: ignore[arg-type]
    return out


def check_selected(overrides: list[str] | list[Override]) -> None:
    """Read with :func:`read_yaml`, before Hydra, every ``--config-dir`` file ``overrides`` select (root
    ``config.yaml``, chosen options, what their defaults name): a bad one is one line; unselected ones stay unopened."""
    users = user_config_dirs()
    if not users:
        return
    todo: list[tuple[str, str]] = []
    for group in (*GROUPS, "logger", "reading"):
        try:
            todo.append((group, chosen_option(group, overrides)))
        except ConfigError:  # a root config.yaml that picks none: Hydra names what is missing
            continue
    sound = held_key("check_selected", *todo)
    if is_held(sound):  # these choices' files were read and found sound
        return
    seen: set[Path] = set()
    while todo:
        group, name = todo.pop()
        path = _not_regular(group, name)
        if path is not None:
            read_yaml(path)  # one line: "... is a FIFO, not a regular file"
        path = find_config(group, name)
        if path is None or path in seen or not _in_user_dir(path, users):
            continue
        seen.add(path)
        todo.extend(_default_entries(read_yaml(path), group))
    hold(sound, True)


def add_config_dir(path: str | Path) -> None:
    """``--config-dir DIR``: kept in the environment so launcher workers see it too."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise ConfigError(f"--config-dir {path}: no such folder")
    current = [p for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p]
    os.environ["MADARA_CONFIG_DIR"] = os.pathsep.join([*current, str(d)])


@held
def _root_config() -> Path:
    """The root ``config.yaml``: the first search folder's regular one."""
    return next(d for d in search_dirs() if _regular(d / "config.yaml")) / "config.yaml"


@held
def search_dirs() -> list[Path]:
    """User config folders first, then the shipped configs."""
    return [*user_config_dirs(), config_dir()]


@held
def find_config(group: str, name: str) -> Path | None:
    """``<group>/<name>.yaml`` from the first search folder that has it as a regular file."""
    for d in search_dirs():
        if _regular(d / group / f"{name}.yaml"):
            return d / group / f"{name}.yaml"
    return None


@held
def options(group: str) -> list[str]:
    """The option names of ``group``: its regular ``*.yaml`` files (names only: none is read)."""
    return sorted({p.stem for d in search_dirs() if (d / group).is_dir() for p in (d / group).glob("*.yaml") if _regular(p)})


@held
def default_option(group: str) -> str:
    """The option of ``group`` the root ``config.yaml``'s defaults list picks."""
    root = _root_config()
    for entry in read_yaml_once(root).get("defaults", []):
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    raise ConfigError(f"{root}: its defaults list picks no {group}")


def chosen_option(group: str, overrides: list[str] | list[Override]) -> str:
    """The ``group`` option of a cell: its last ``group=NAME``, else the default."""
    chosen = None
    for o in parse_overrides(overrides):
        h = o.hydra
        if h is not None and h.key_or_group == group and not h.is_sweep_override() and not h.package:
            chosen = str(h.value())
    return chosen or default_option(group)


def chosen_loader(benchmark: str, overrides: list[str] | list[Override]) -> str:
    """The loader a cell's benchmark node names: its last ``benchmark.loader=NAME``, else benchmark ``benchmark``'s yaml's."""
    named = None
    for o in parse_overrides(overrides):
        h = o.hydra
        if h is not None and h.key_or_group == "benchmark.loader" and not h.is_sweep_override() and not h.package:
            named = str(h.value())
    node = _option_yaml(benchmark, "benchmark")
    return named or ("" if node is None else str(node.get("loader", "")))


def chosen_strategy(overrides: list[str] | list[Override]) -> str:
    """The strategy option of a cell: its last ``strategy=NAME``, else the default."""
    return chosen_option("strategy", overrides)


@held
def _option_yaml(option: str, group: str = "strategy") -> DictConfig | None:
    path = find_config(group, option)
    if path is None:
        return None
    node = read_yaml_once(path)
    return node if isinstance(node, DictConfig) else None


def _schema_default(node: DictConfig, group: str = "strategy") -> str | None:
    """The ``<name>_schema`` entry of a group yaml's defaults list, if it has one."""
    for entry in node.get("defaults", []):
        if isinstance(entry, str) and entry.endswith(SCHEMA_SUFFIX) and plugins.schema_for(group, entry[: -len(SCHEMA_SUFFIX)]):
            return entry[: -len(SCHEMA_SUFFIX)]
    return None


def option_impl(option: str) -> str:
    """The implementation strategy ``option`` runs: its yaml's ``impl``, its defaults' schema, its ``name``, or ``option``."""
    node = _option_yaml(option)
    if node is None:
        return option
    return str(node.get("impl") or _schema_default(node) or node.get("name") or option)


def group_schema(group: str, option: str) -> type | None:
    """The schema of ``group`` option ``option`` (strategies by :func:`option_schema`, others by their yaml's ``name``), or None."""
    if group == "strategy":
        return option_schema(option)
    node = _option_yaml(option, group)
    return plugins.schema_for(group, str(node.get("name", option)) if node is not None else option)


def _require_schema(group: str, option: str) -> type:
    """The schema of ``group`` option ``option``; an unknown implementation is the catalog's one line."""
    schema = group_schema(group, option)
    if schema is not None:
        return schema
    impl = option_impl(option) if group == "strategy" else str((_option_yaml(option, group) or {}).get("name", option))
    return CATALOG.get(group, impl).schema  # type: ignore[return-value]


def option_schema(option: str) -> type[StrategyConfig] | None:
    """The schema of strategy option ``option``: its defaults list's, else that of the strategy its
    ``name`` runs (a user config without defaults); None for a strategy madara does not ship."""
    node = _option_yaml(option)
    if node is None:
        return strategy_schema(option)
    return strategy_schema(option_impl(option))


def option_settings(option: str) -> list[str]:
    """The settings strategy option ``option`` reads (``name`` first)."""
    schema = option_schema(option)
    return list(schema.__dataclass_fields__) if schema else ["name"]


def inapplicable_strategy_overrides(overrides: list[str] | list[Override]) -> list[str]:
    """``strategy.X=...`` overrides whose X another strategy has but the cell's lacks (a misspelt X: compose names it)."""
    parsed = parse_overrides(overrides)
    schema = option_schema(chosen_strategy(parsed))
    if schema is None:
        return []
    known = plugins.all_settings("strategy")
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
        if key == "prompts" and not o.package and not o.is_sweep_override() and str(o.value()) not in prompt_set_names(search_dirs()):
            raise ConfigError(f"unknown prompt set '{o.value()}'; valid prompt sets: {', '.join(prompt_set_names(search_dirs()))}")
        if key in (*GROUPS, "logger", "reading") and not o.is_sweep_override():
            value = o.value()
            valid = options(key)
            if value not in valid and isinstance(value, str) and _not_regular(key, value) is not None:
                read_yaml(_not_regular(key, value))  # one line naming the FIFO (or folder) of that name
            if value not in valid:
                raise ConfigError(f"unknown {key} '{value}'; valid {plural(key)}: {', '.join(valid)}")
    check_selected(parsed)


def _no_sweeps(overrides: list[Override]) -> None:
    """One config at a time: a sweep (``key=a,b``) gets a hint, not Hydra's multi-line "Ambiguous value"."""
    for o in overrides:
        if o.hydra.is_sweep_override():
            raise ConfigError(f"'{o.raw}' is a sweep: run it with madara run -m {o.raw} (or --grid); for a list value write {o.hydra.key_or_group}=[...]")


_PRIMARY_COPIES: dict[str, tuple[str, tuple]] = {}  # the root config.yaml -> (its scratch folder, its stamp when copied)


@held
def primary_and_searchpath() -> tuple[str, list[str]]:
    """Hydra's primary config folder and the ``hydra.searchpath`` override putting ``--config-dir``
    folders first. Hydra remembers a primary not found before the search path grew, so with user
    folders the primary is a scratch copy of the first ``config.yaml`` (recopied when its stamp moves)."""
    users = user_config_dirs()
    if not users:
        return str(config_dir().resolve()), []
    root = _root_config()
    key = str(root.resolve())
    try:
        st = root.stat()
        stamp: tuple = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        stamp = ()
    kept = _PRIMARY_COPIES.get(key)
    if kept is None or kept[1] != stamp or not stamp or not Path(kept[0], "config.yaml").is_file():
        import tempfile

        tmp = kept[0] if kept is not None and Path(kept[0]).is_dir() else tempfile.mkdtemp(prefix="madara-configs-")
        from madara_cli.core.sidefiles import read_text

        Path(tmp, "config.yaml").write_text(read_text(root, "the config", ConfigError), encoding="utf-8")
        _PRIMARY_COPIES[key] = (tmp, stamp)
    return _PRIMARY_COPIES[key][0], [_searchpath()]


def scratch_primaries() -> set[str]:
    """The scratch primaries made so far (copies of a search-path ``config.yaml``, covered by its stamp)."""
    return {folder for folder, _ in _PRIMARY_COPIES.values()}


def _searchpath() -> str:
    paths = ",".join("file://" + str(d.resolve()) for d in search_dirs())
    return f"hydra.searchpath=[{paths}]"


# --- Prompt sets: prompts=NAME reads prompts/NAME/ from the search folders; no Hydra group (a folder
# of text files, not a yaml option), so compose sets the key itself ---


def _split_prompts(overrides: list[Override]) -> tuple[list[Override], str | None]:
    """The overrides Hydra composes, and the prompt set a ``prompts=NAME`` among them picks."""
    rest, chosen = [], None
    for o in overrides:
        h = o.hydra
        if h is not None and h.key_or_group == "prompts" and not h.package and not h.is_delete():
            value = h.value()
            if not isinstance(value, str) or not value:
                raise ConfigError(f"'{o.raw}': prompts takes the name of a prompt set; valid prompt sets: {', '.join(prompt_set_names(search_dirs()))}")
            chosen = value
        else:
            rest.append(o)
    return rest, chosen


@held
def prompt_set(name: str = SHIPPED) -> PromptSet:
    """Prompt set ``name`` (``prompts/<name>/`` of the first search folder that has it), checked."""
    return load_prompt_set(name, search_dirs())


def shipped_prompt_set() -> PromptSet:
    """The shipped set, ``configs/prompts/madara/``: what request builders handed no set render."""
    return load_prompt_set(SHIPPED, [config_dir()])


def prompts_of(cfg: Any) -> PromptSet:
    """The prompt set a composed config names (``cfg.prompts``), else the shipped one."""
    name = cfg.get("prompts", None) if hasattr(cfg, "get") else None
    return prompt_set(str(name)) if name else shipped_prompt_set()


def _first_lines(e: Exception) -> str:
    """Hydra's message on one line: its first, and the next when the first only says where ("In 'strategy/x': ...:")."""
    lines = [" ".join(x.split()) for x in str(e).split("\n") if x.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else type(e).__name__


def load_grid(name: str) -> GridConfig:
    from madara_cli.core.paths import check_name

    check_name("--grid", name, ConfigError)
    path = find_config("grid", name)
    if path is None:
        raise ConfigError(f"unknown grid '{name}'; valid grids: {', '.join(options('grid'))}")
    raw = read_yaml(path)
    try:
        kind = str(raw.get("kind", GridKind.cells)) if isinstance(raw, DictConfig) else str(GridKind.cells)
        merged = OmegaConf.merge(OmegaConf.structured(GridConfig), raw) if kind in GridKind.__members__ else None
        grid: GridConfig = OmegaConf.to_object(merged) if merged is not None else None  # type: ignore[assignment]
    except MissingMandatoryValue as e:
        raise ConfigError(f"bad grid {path.name}: it has no '{e.full_key}'") from None
    except Exception as e:  # noqa: BLE001 - any YAML/schema error is the user's to fix
        raise ConfigError(f"bad grid {path.name}: {' '.join(str(e).split())}") from None
    if grid is None:
        raise ConfigError(f"grid {name}: unknown kind '{kind}'; valid kinds: {', '.join(GridKind.__members__)}")
    check_name(f"grid {path.name}: name", grid.name, ConfigError)
    for group, values in grid.axes.items():
        if group not in GROUPS:
            raise ConfigError(f"grid {name}: unknown axis '{group}'; valid axes: {', '.join(GROUPS)}")
        known = set(options(group))  # listed once an axis: once a value listed a 10,000-option group 10,000 times
        bad = [v for v in values if v not in known]
        if bad:
            raise ConfigError(f"grid {name}: unknown {group} {bad}; valid: {', '.join(options(group))}")
    return grid


def paper_grids() -> list[str]:
    """The grids ``madara reproduce`` runs (``produces:`` a paper table), in order: probe grids first
    (routed ``madara`` cells reuse their probes), ``tableN`` by N, the rest by name."""
    import re

    grids = [load_grid(g) for g in options("grid")]

    def order(g: GridConfig) -> tuple:
        m = re.fullmatch(r"table(\d+)", g.name)
        return (g.kind != "probes", m is None, int(m.group(1)) if m else 0, g.name)

    return [g.name for g in sorted((g for g in grids if g.produces), key=order)]
