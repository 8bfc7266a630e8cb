"""Composition: a run's config made from the config files and the plug-ins' schemas.

It sits above the plug-ins (data, backends, strategies), so it imports them itself
(:mod:`.plugins`: shipped, installed and ``--include`` ones) instead of reaching up
through callbacks; :func:`compose` is the one entry point the layers above use.
"""

from madara_cli.composition.compose import compose, strategy_node
from madara_cli.composition.plugins import add_include, ensure_loaded, forget_loaded, load_plugins

__all__ = ["add_include", "compose", "ensure_loaded", "forget_loaded", "load_plugins", "strategy_node"]
