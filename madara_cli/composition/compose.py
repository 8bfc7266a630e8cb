"""Composing a run's config: :func:`compose` lays the Hydra overrides over
``configs/config.yaml`` and the chosen options' schemas, checked and resolved.

Composition sits above the plug-ins it composes (backends, retrievers, strategies,
benchmark loaders): it loads them itself (:func:`madara_cli.composition.plugins.ensure_loaded`)
and asks the data layer for a benchmark loader by name, so nothing below it holds a
callback. Where configs are found, the override checks that need no plug-in and grids
stay in :mod:`madara_cli.config`.

``configs/config.yaml`` starts its defaults list with ``base_config`` (the
:class:`~madara_cli.config.schema.RootConfig` schema), and each
``configs/strategy/<name>.yaml`` with ``<name>_schema`` (that strategy's own
schema), so composition validates every group option and every choice (Enum)
setting; :mod:`madara_cli.config.validate` checks overrides first and ranges after.
The composed config holds plain strings for the choices.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from madara_cli.composition.plugins import ensure_loaded
from madara_cli.config.folders import (
    _first_lines,
    _no_sweeps,
    _option_yaml,
    _require_schema,
    _schema_default,
    _split_prompts,
    chosen_option,
    option_impl,
    primary_and_searchpath,
    prompt_set,
    validate_overrides,
)
from madara_cli.config.overrides import Override, parse_overrides
from madara_cli.config.plugin_schemas import PLUGGABLE
from madara_cli.config.schema import RootConfig, register_schemas
from madara_cli.data.loaders import find_loader
from madara_cli.errors import ConfigError


def _force_add_settings(overrides: list[Override], chosen: dict[str, str]) -> list[str]:
    """A group yaml without a ``<name>_schema`` defaults entry (the shipped backends and
    retrievers, a user's strategy) composes as a free node holding only its own keys;
    its schema is laid over it after composition, so an override of a schema setting
    the yaml leaves out is passed as ``++group.X`` (set or add) instead of failing as
    an unknown key."""
    free = []
    for group, option in chosen.items():
        node = _option_yaml(option, group)
        if node is not None and _schema_default(node, group) is None:
            free.append(group + ".")
    if not free:
        return [o.raw for o in overrides]
    out = []
    for o in overrides:
        h = o.hydra
        plain = not (h.package or h.is_add() or h.is_force_add() or h.is_delete())
        out.append("++" + o.raw if plain and h.key_or_group.startswith(tuple(free)) else o.raw)
    return out


def _typed_group(cfg: DictConfig, group: str, option: str) -> str | None:
    """Lay the group option's schema over a node composed without it (see above); a
    strategy's ``impl`` is returned (it is no setting of the schema)."""
    impl = None
    if group == "strategy" and "impl" in cfg.strategy:
        impl = cfg.strategy.impl
        with open_dict(cfg.strategy):
            del cfg.strategy["impl"]
    if OmegaConf.get_type(cfg[group]) is not dict:
        return impl
    schema = _require_schema(group, option)
    settings = list(schema.__dataclass_fields__)
    extra = [k for k in cfg[group] if k not in settings]
    if extra:
        label = cfg[group].get("name", option)
        raise ConfigError(f"{group} {option}: {group}.{extra[0]} does not apply to {group} {label}; its settings: {', '.join(settings)}")
    try:
        cfg[group] = OmegaConf.merge(OmegaConf.structured(schema), cfg[group])
    except OmegaConfBaseException as e:
        raise ConfigError(f"{group} {option}: {group}.{getattr(e, 'key', '?')}: {_first_lines(e)}") from None
    return impl


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
    ensure_loaded()  # shipped, installed and --include plugins register their schemas, once
    validate_overrides(parsed)
    chosen = {g: chosen_option(g, parsed) for g in PLUGGABLE}
    schemas = {g: (o, _require_schema(g, o)) for g, o in chosen.items()}  # an unknown implementation: one line, now
    check_override_types(parsed, RootConfig, ConfigError, groups=schemas)
    _no_sweeps(parsed)
    register_schemas()
    hydra_overrides, prompts = _split_prompts(parsed)
    GlobalHydra.instance().clear()
    try:
        primary, extra = primary_and_searchpath()
        with initialize_config_dir(config_dir=primary, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[*extra, *_force_add_settings(hydra_overrides, chosen)])
        impl = None
        for group in PLUGGABLE:
            found = _typed_group(cfg, group, chosen[group])
            impl = found if group == "strategy" else impl
        impl = impl or option_impl(chosen["strategy"])  # a yaml naming <impl>_schema runs that implementation
        if prompts is not None:
            cfg.prompts = prompts
        OmegaConf.resolve(cfg)
        cfg.overrides = list(overrides)
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, enum_to_str=True))
        if impl is not None and str(impl) != str(cfg.strategy.name):  # impl == name: elided, so shipped keys stay put
            cfg.strategy.impl = str(impl)
        OmegaConf.set_struct(cfg, True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad config: {_first_lines(e)} (keys: {', '.join(RootConfig.__dataclass_fields__)})") from None
    _known_loader(cfg)
    validate_config(cfg, ConfigError)  # ranges and each chosen plug-in's checks, before any data or model loads
    prompt_set(str(cfg.prompts))  # every template read and checked, before any model loads
    return cfg


def _known_loader(cfg: DictConfig) -> None:
    """``benchmark.loader`` names a registered loader (the data layer's own lookup, which
    loads the shipped loaders and the ``madara.loaders`` entry points afresh, so one
    installed since is found too): one line listing the known ones otherwise."""
    find_loader(str(cfg.benchmark.get("loader", "")))


def strategy_node(option: str) -> DictConfig:
    """Strategy option ``option``'s settings as a composed config would hold them (its
    schema's defaults and its yaml), plain strings for the choices."""
    return compose([f"strategy={option}"]).strategy
