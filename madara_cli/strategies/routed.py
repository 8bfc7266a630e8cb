"""MADARA's routed strategy (``strategy=madara``): the RSC probe on the calibration
queries, then the treatment the router picks (PDE, SDA, CoT or ATF), run with its own
config. Its settings and the prompt families it sends are declared here, beside the
other strategies'; what it runs is composed one floor up, where the probe and the
engine pool live (:class:`madara_cli.experiment.treat.Treatment`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from madara_cli.config.schema import ConflictCalls, RankTies, Scoring, Selection, StrategyConfig, Vote
from madara_cli.strategies.context import STRATEGIES

ROUTED = "madara"
# Its prepare step: the probe (reused, or run on the calibration split), then the route;
# it returns the routed treatment (madara_cli.experiment.treat registers it).
PROBE_AND_ROUTE = "probe_and_route"


@dataclass
class MadaraConfig(StrategyConfig):
    """MADARA: the probe, then the routed treatment (PDE, SDA, CoT or ATF) with its own
    config. The treatments' settings are here so they can be set on a madara cell; one
    the user set carries over to the routed treatment when that treatment has it
    (``scoring`` not to CoT, whose reasoning is generated)."""

    probe: Optional[str] = None  # path to a finished probe.json to reuse
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


# Its probe re-scores through the forced prompt and its routed treatments (SDA, CoT, ATF,
# PDE) ask the Conflict Detector, so the detector's words are its key's too; the probe's
# settings (rsc) and the router's are part of a madara cell's identity.
STRATEGIES.register_prepared(ROUTED, schema=MadaraConfig, prompts=("assessors", "detector", "rescore"),
                             prepare=PROBE_AND_ROUTE, key_groups=("rsc", "router"))
