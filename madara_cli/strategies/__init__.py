"""Document-assessment strategies. Each module registers the spec of one or more
strategies (:class:`~madara_cli.strategies.context.StrategySpec`) in the one catalog;
``configs/strategy/<name>.yaml`` selects one."""

from madara_cli.strategies.context import StrategyContext, StrategySpec, strategy_fn

__all__ = ["StrategyContext", "StrategySpec", "strategy_fn"]
