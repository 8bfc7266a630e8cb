"""Composition: a run's config from the config files and the plug-ins' schemas. Above the plug-ins,
it imports them itself (:mod:`.plugins`), no callbacks; :func:`compose` is the layers above's one entry."""

from madara_cli.composition.compose import compose, strategy_node
from madara_cli.composition.plugins import add_include, ensure_loaded, forget_loaded, load_plugins

__all__ = ["add_include", "compose", "ensure_loaded", "forget_loaded", "load_plugins", "strategy_node"]
