"""Configuration: schemas (:mod:`.schema`), config folders, options and grids
(:mod:`.folders`), the checks before any data or model loads (:mod:`.validate`) and the
identity room (:mod:`.identity`, :mod:`.keys`); composing is :mod:`madara_cli.composition`'s."""

from madara_cli.config.folders import (
    add_config_dir,
    chosen_strategy,
    config_dir,
    find_config,
    inapplicable_strategy_overrides,
    load_grid,
    option_settings,
    options,
    paper_grids,
    validate_overrides,
)
from madara_cli.config.schema import GROUPS, GridConfig, RootConfig, Selection, Vote, plural, register_schemas, strategy_settings
from madara_cli.config.settings import to_plain

__all__ = [
    "GROUPS", "GridConfig", "RootConfig", "Selection", "Vote", "add_config_dir", "chosen_strategy", "config_dir", "find_config",
    "inapplicable_strategy_overrides", "load_grid", "option_settings", "options", "paper_grids", "plural", "register_schemas",
    "strategy_settings", "to_plain", "validate_overrides",
]
