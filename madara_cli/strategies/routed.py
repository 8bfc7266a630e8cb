"""MADARA's routed strategy (``strategy=madara``): the RSC probe on the calibration
queries, then the treatment the router picks (PDE, SDA, CoT or ATF), run with its own
config. Its spec lives here beside the other strategies'; what runs a cell is the route
of its probe, worked out where the probe and the engine pool live
(:mod:`madara_cli.experiment.treat`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from madara_cli.config.schema import ConflictCalls, RankTies, Scoring, Selection, StrategyConfig, Vote, input_field
from madara_cli.plugins import int_range, num_range, register
from madara_cli.strategies.assessed import ASSESSED_CHECKS, ASSESSED_PROMPTS, ASSESSED_RANGES
from madara_cli.strategies.context import StrategySpec

ROUTED = "madara"


@dataclass
class MadaraConfig(StrategyConfig):
    """MADARA: the probe, then the routed treatment (PDE, SDA, CoT or ATF) with its own
    config. The treatments' settings are here so they can be set on a madara cell; one
    the user set carries over to the routed treatment when that treatment has it
    (``scoring`` not to CoT, whose reasoning is generated)."""

    probe: Optional[str] = input_field("file")  # path to a finished probe.json to reuse
    top_k: int = 5
    weights: list[float] = field(default_factory=lambda: [0.4, 0.3, 0.3])
    scoring: Scoring = Scoring.generate
    cot: bool = False
    kappa: float = 0.5
    min_keep: int = 2
    selection: Selection = Selection.assessed
    vote: Vote = Vote.score
    conflict: ConflictCalls = ConflictCalls.per_query
    rank_ties: RankTies = RankTies.ordinal


def check_probe(cfg) -> None:
    """A pinned probe must be there; a probe to run needs two calibration queries at least
    (fewer have no correlation)."""
    from pathlib import Path

    from madara_cli.core.errors import ConfigError

    probe = cfg.strategy.get("probe")
    if probe:
        p = Path(str(probe)).expanduser()
        if not p.is_file():
            raise ConfigError(f"strategy.probe: no probe file at {p} (run 'madara probe' first, or unset strategy.probe)")
        return
    calibration = cfg.benchmark.get("calibration")
    if isinstance(calibration, int) and calibration < MIN_CALIBRATION:
        raise ConfigError(f"benchmark.calibration={calibration} is out of range for strategy=madara: its RSC probe needs at least "
                          f"{MIN_CALIBRATION} calibration queries (or strategy.probe=PATH, a finished probe)")


# The RSC probe correlates scores over calibration queries: fewer than two have no correlation.
MIN_CALIBRATION = 2

# Its probe re-scores through the forced prompt and its treatments ask the Conflict
# Detector, so those words key it too, as do the probe's (rsc) and the router's settings.
SPEC = register(StrategySpec(
    name=ROUTED, schema=MadaraConfig, routed=True, prompts=(*ASSESSED_PROMPTS, "rescore"), key_groups=("rsc", "router"),
    ranges={**ASSESSED_RANGES, "kappa": num_range(0.0), "min_keep": int_range(0)}, checks=(*ASSESSED_CHECKS, check_probe),
    description="MADARA: probe the model (RSC), route, and run the treatment the route names",
))
