"""Document-assessment strategies. Each is a function over the whole cell's examples,
registered by name; ``configs/strategy/<name>.yaml`` selects it."""

from madara_cli.strategies.context import STRATEGIES, StrategyContext, load_all

__all__ = ["STRATEGIES", "StrategyContext", "load_all"]
