"""Configuration: dataclass schemas (:mod:`.schema`: one per group, one per strategy,
Enum choices), the config search path, options and grids (:mod:`.folders`), and the
checks that run before any data or model loads (:mod:`.validate`). Composing a config
is one layer up, above the plug-ins (:mod:`madara_cli.composition`). The names most
code needs are re-exported here."""

from madara_cli.config.folders import (
    add_config_dir,
    chosen_strategy,
    config_dir,
    default_strategy,
    find_config,
    inapplicable_strategy_overrides,
    load_grid,
    option_schema,
    option_settings,
    options,
    paper_grids,
    search_dirs,
    user_config_dirs,
    validate_overrides,
)
from madara_cli.config.keys import to_plain
from madara_cli.config.schema import (
    GROUPS,
    BackendConfig,
    BenchmarkConfig,
    CalibrationSplit,
    Choice,
    DType,
    FirstStage,
    GenerationConfig,
    GridConfig,
    GridKind,
    ModelConfig,
    RetrieverConfig,
    RootConfig,
    RSCConfig,
    Scoring,
    Selection,
    StrategyConfig,
    Style,
    Task,
    Tokenizer,
    Vote,
    plural,
    register_schemas,
    strategy_schema,
    strategy_settings,
)

# ConfigError lives in madara_cli.core.errors; it stays importable from here, the name most
# config callers reach for.
from madara_cli.core.errors import ConfigError

__all__ = [
    "GROUPS", "BackendConfig", "BenchmarkConfig", "CalibrationSplit", "Choice", "ConfigError", "DType",
    "FirstStage", "GenerationConfig", "GridConfig", "GridKind", "ModelConfig", "RSCConfig", "RetrieverConfig", "RootConfig", "Scoring",
    "Selection", "StrategyConfig", "Style", "Task", "Tokenizer", "Vote", "add_config_dir", "chosen_strategy",
    "config_dir", "default_strategy", "find_config", "inapplicable_strategy_overrides", "load_grid", "option_schema",
    "option_settings", "options", "paper_grids", "plural", "register_schemas", "search_dirs", "strategy_schema",
    "strategy_settings", "to_plain", "user_config_dirs", "validate_overrides",
]
