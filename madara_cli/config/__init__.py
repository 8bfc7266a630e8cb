"""Configuration: dataclass schemas (:mod:`.schema`), composition and the config search
path (:mod:`.compose`), and the checks that run before any data or model loads
(:mod:`.validate`). The names most code needs are re-exported here."""

from madara_cli.config.compose import (
    add_config_dir,
    compose,
    config_dir,
    find_config,
    load_grid,
    options,
    paper_grids,
    search_dirs,
    to_plain,
    user_config_dirs,
    validate_overrides,
)
from madara_cli.config.schema import (
    GROUPS,
    BackendConfig,
    BenchmarkConfig,
    ConfigError,
    GenerationConfig,
    GridConfig,
    ModelConfig,
    RetrieverConfig,
    RootConfig,
    RSCConfig,
    StrategyConfig,
    plural,
    register_schemas,
)

__all__ = [
    "GROUPS", "BackendConfig", "BenchmarkConfig", "ConfigError", "GenerationConfig", "GridConfig", "ModelConfig",
    "RSCConfig", "RetrieverConfig", "RootConfig", "StrategyConfig", "add_config_dir", "compose", "config_dir",
    "find_config", "load_grid", "options", "paper_grids", "plural", "register_schemas", "search_dirs", "to_plain",
    "user_config_dirs", "validate_overrides",
]
