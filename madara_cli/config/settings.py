"""A cell's settings as one flat row: the dotted names summary.csv and tracking show.

The settings a cell's key covers (:func:`madara_cli.experiment.grid.key_settings` adds
the metric version and the prompt digests, which only a run can know) come from the
composed config alone, so the results layer can rebuild them for cells written before
their settings were recorded without importing the experiment.
"""

from __future__ import annotations

import json
from typing import Any

from madara_cli.config.compose import strategy_impl, to_plain
from madara_cli.config.plugin_schemas import unkeyed
from madara_cli.config.schema import keyed, reading_key

# Root groups whose settings can change a cell's numbers.
SEMANTIC_GROUPS = ("model", "backend", "benchmark", "retriever", "strategy", "generation")


def nested_settings(cfg: Any) -> dict:
    """The keyed settings of ``cfg`` by group (runtime-only ones left out), plus limit,
    seed and, for a madara cell, the probe's ``rsc`` settings."""
    plain = to_plain(cfg)
    nested: dict = {g: {k: v for k, v in plain[g].items() if k not in unkeyed(g, str(plain[g].get("name")))} for g in SEMANTIC_GROUPS}
    nested["generation"] = keyed("generation", nested["generation"])  # rescore_max_tokens unset: the columns as before it
    reading = reading_key(plain.get("reading"))
    if reading:
        nested["reading"] = reading
    nested["limit"], nested["seed"] = plain.get("limit"), plain.get("seed")
    if strategy_impl(cfg.strategy) == "madara":
        nested["rsc"] = plain.get("rsc")
    return nested


def flatten(nested: dict) -> dict[str, Any]:
    """Dotted names (``strategy.top_k``, ``model.temperature``); lists as JSON text."""
    out: dict[str, Any] = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, tuple)) else v

    walk(nested, "")
    return out


def flat_settings(cfg: Any) -> dict[str, Any]:
    """The settings a cell's key covers from its config alone, flattened (no prompt
    digests and no metric version: a stored config.yaml cannot say which ran)."""
    return flatten(nested_settings(cfg))
