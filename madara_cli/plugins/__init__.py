"""Plug-ins: the one spec shape every kind shares (:mod:`.spec`) and the one catalog
they register in (:mod:`.catalog`). Loading them is composition's
(:mod:`madara_cli.composition.plugins`)."""

from madara_cli.plugins.catalog import CATALOG, register
from madara_cli.plugins.shape import PromptFamily, Range, Spec, int_range, num_range

__all__ = ["CATALOG", "PromptFamily", "Range", "Spec", "int_range", "num_range", "register"]
