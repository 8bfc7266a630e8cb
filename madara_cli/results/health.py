"""The health of a cell: what its numbers rest on, stage by stage.

A score the strategy cannot read from a reply is imputed (:func:`madara_cli.agents.matrix.impute`);
a cell whose scores are mostly imputed still prints an EM that says little about the strategy.
:class:`Health` counts per scoring stage (``accounting.by_stage``'s names: ``score``,
``score-cot``, ``score-logprob``, their per-query ``-conflict`` stage, ``main-rag-judge``):
``scores`` to read, ``parsed`` from a reply, ``imputed`` the rest (the judge's documents
without Yes/No log-probabilities too), ``cut_at_max_tokens`` replies, ``missing_id``
documents the per-query detector left out (part of ``imputed``).

:class:`HealthRule` (config group ``health``): ``degraded`` when more than
``health.max_imputed`` (10 %) of one stage's scores were imputed; ``on_degraded=fail``
fails such a cell. A cell that scores nothing is ``ok``; an older record's health is derived
from its sections where they say enough, else ``unknown``. Health never enters a key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from madara_cli.config.schema import HealthConfig
from madara_cli.core.vocabulary import AGENTS, CONFLICT, JUDGE_STAGE, conflict_stage_name, stage_name

OK, DEGRADED, UNKNOWN = "ok", "degraded", "unknown"
STATUSES = (OK, DEGRADED, UNKNOWN)
# A strong model's JSON fails on a few percent of replies at most; past a tenth imputed,
# the documents' ranking is the imputation's rather than the model's.
DEFAULT_MAX_IMPUTED: float = HealthConfig.max_imputed
MARK = "◊"  # what a paper table puts after a number that rests on a degraded cell

# The setting whose budget a stage's replies were cut at.
_BUDGET = {"score": "generation.score_max_tokens", "score-conflict": "generation.score_max_tokens",
           "score-cot": "generation.cot_max_tokens", "score-cot-conflict": "generation.cot_max_tokens"}


@dataclass(frozen=True)
class StageHealth:
    """One scoring stage: see the module docstring for each count."""

    stage: str
    scores: int
    parsed: int
    cut_at_max_tokens: int = 0
    missing_id: int = 0

    @property
    def imputed(self) -> int:
        return max(self.scores - self.parsed, 0)

    @property
    def imputed_share(self) -> float:
        return self.imputed / self.scores if self.scores else 0.0

    def cause(self) -> str:
        """Why the stage's scores were imputed, in a few words with their counts."""
        if self.missing_id and 2 * self.missing_id >= self.imputed:
            return f"{self.missing_id} document(s) missing an id in the detector's replies"
        if self.cut_at_max_tokens:
            budget = _BUDGET.get(self.stage)
            return f"{self.cut_at_max_tokens} repl{'y' if self.cut_at_max_tokens == 1 else 'ies'} cut at the token budget" + (
                f" {budget}" if budget else "")
        if self.stage == JUDGE_STAGE:
            return "replies without Yes/No log-probabilities"
        if self.stage.startswith("score-logprob"):
            return "no probability on the score digits"
        return "replies that could not be read as a score"

    def to_dict(self) -> dict[str, int]:
        return {"scores": self.scores, "parsed": self.parsed, "imputed": self.imputed,
                "cut_at_max_tokens": self.cut_at_max_tokens, "missing_id": self.missing_id}

    @classmethod
    def from_dict(cls, stage: str, d: Mapping[str, Any]) -> "StageHealth | None":
        scores, parsed = _count(d.get("scores")), _count(d.get("parsed"))
        if scores is None or parsed is None:
            return None
        return cls(stage, scores, min(parsed, scores), _count(d.get("cut_at_max_tokens")) or 0, _count(d.get("missing_id")) or 0)


@dataclass(frozen=True)
class HealthRule:
    """When a cell is degraded (``max_imputed``) and what a run does then (``on_degraded``: warn, fail)."""

    max_imputed: float = DEFAULT_MAX_IMPUTED
    on_degraded: str = "warn"

    @classmethod
    def from_config(cls, cfg: Any) -> "HealthRule":
        """The rule of a composed config's ``health`` group (the defaults where it has none)."""
        node = cfg.get("health") if hasattr(cfg, "get") else None
        if not node:
            return cls()
        return cls(float(node.get("max_imputed", DEFAULT_MAX_IMPUTED)), str(node.get("on_degraded", "warn")))


@dataclass(frozen=True)
class Health:
    """A cell's status, stages and threshold; ``recorded`` False when derived from an older record's sections."""

    status: str
    stages: tuple[StageHealth, ...] = ()
    max_imputed: float = DEFAULT_MAX_IMPUTED
    recorded: bool = field(default=True, compare=False)

    @property
    def degraded(self) -> bool:
        return self.status == DEGRADED

    @property
    def scores(self) -> int:
        return sum(s.scores for s in self.stages)

    @property
    def imputed(self) -> int:
        return sum(s.imputed for s in self.stages)

    def over(self) -> list[StageHealth]:
        """The stages past the threshold, the worst share first."""
        bad = [s for s in self.stages if s.scores and s.imputed_share > self.max_imputed + 1e-12]
        return sorted(bad, key=lambda s: (-s.imputed_share, -s.imputed, s.stage))

    @property
    def reason(self) -> str | None:
        """The worst stage past the threshold and its cause (None unless degraded)."""
        bad = self.over()
        if self.status != DEGRADED or not bad:
            return None
        worst = bad[0]
        more = f"; {len(bad) - 1} more stage(s) past it" if len(bad) > 1 else ""
        return (f"stage {worst.stage}: {worst.imputed} of {worst.scores} scores imputed, more than "
                f"health.max_imputed={_share(self.max_imputed)} ({worst.cause()}){more}")

    def judged(self, rule: HealthRule) -> "Health":
        """The same counts judged by ``rule``'s threshold (an unknown health stays unknown)."""
        if self.status == UNKNOWN:
            return self
        return judge(self.stages, rule.max_imputed, recorded=self.recorded)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "max_imputed": self.max_imputed,
                               "stages": {s.stage: s.to_dict() for s in self.stages}}
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Health | None":
        """A recorded ``health`` section, or None when it is not one."""
        status, stages = d.get("status"), d.get("stages")
        if status not in STATUSES or not isinstance(stages, Mapping):
            return None
        read = [StageHealth.from_dict(str(k), v) for k, v in stages.items() if isinstance(v, Mapping)]
        limit = d.get("max_imputed")
        limit = float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) and math.isfinite(limit) else DEFAULT_MAX_IMPUTED
        return cls(str(status), tuple(s for s in read if s is not None), limit)


def judge(stages: tuple[StageHealth, ...] | list[StageHealth], max_imputed: float = DEFAULT_MAX_IMPUTED, recorded: bool = True) -> Health:
    """The health of these stages under the threshold ``max_imputed``."""
    stages = tuple(stages)
    bad = any(s.scores and s.imputed / s.scores > max_imputed + 1e-12 for s in stages)
    return Health(DEGRADED if bad else OK, stages, float(max_imputed), recorded)


def cell_health(report: Mapping[str, Any], accounting: Mapping[str, Any], rule: HealthRule | None = None,
                recorded: bool = True) -> Health:
    """A cell's health from its report's ``assessment``/``main_rag`` and its ``accounting``, as the
    runner records it and an older record is read; ``unknown`` when a scoring section says too little."""
    rule = rule or HealthRule()
    by_stage = accounting.get("by_stage") if isinstance(accounting.get("by_stage"), Mapping) else {}
    stages: list[StageHealth] = []
    assessment = report.get("assessment")
    if isinstance(assessment, Mapping) and assessment:
        read = _assessment_stages(assessment, by_stage)
        if read is None:
            return Health(UNKNOWN, (), rule.max_imputed, recorded)
        stages += read
    judged = report.get("main_rag")
    if isinstance(judged, Mapping) and JUDGE_STAGE in by_stage:
        requests, rate = _count(by_stage[JUDGE_STAGE].get("requests")), judged.get("judge_failure_rate")
        if requests is None or not isinstance(rate, (int, float)):
            return Health(UNKNOWN, (), rule.max_imputed, recorded)
        stages.append(StageHealth(JUDGE_STAGE, requests, requests - int(round(float(rate) * requests))))
    if not stages and any(_scores_in(name) for name in by_stage):
        return Health(UNKNOWN, (), rule.max_imputed, recorded)  # it scored, but no section says how that went
    return judge(stages, rule.max_imputed, recorded)


def _scores_in(stage: str) -> bool:
    return stage.startswith("score") or stage == JUDGE_STAGE


def _assessment_stages(a: Mapping[str, Any], by_stage: Mapping[str, Any]) -> list[StageHealth] | None:
    """The assessment's scores by stage (a per-query Conflict Detector has its own ``-conflict`` stage)."""
    by_agent = a.get("by_agent")
    if not isinstance(by_agent, Mapping):
        return None
    mode, cot = str(a.get("mode", "generate")), bool(a.get("cot"))
    conflict = a.get("conflict") if isinstance(a.get("conflict"), Mapping) else {}
    per_query = conflict.get("calls") == "per_query"
    base, apart = stage_name(cot, mode), conflict_stage_name(cot, mode)
    counts: dict[str, list[int]] = {}
    for agent in AGENTS:
        stats = by_agent.get(agent)
        if stats is None:
            continue
        scores, valid = _count(stats.get("n_scores")), _count(stats.get("n_valid"))
        if scores is None or valid is None:
            return None
        name = apart if per_query and agent == CONFLICT else base
        total = counts.setdefault(name, [0, 0])
        total[0] += scores
        total[1] += valid
    missing = _count(conflict.get("missing_ids")) or 0
    out = []
    for name, (scores, valid) in counts.items():
        cut = _count((by_stage.get(name) or {}).get("cut_at_max_tokens")) or 0
        out.append(StageHealth(name, scores, min(valid, scores), cut, missing if name == apart else 0))
    return out


def _count(x: Any) -> int | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        return None
    return int(x)


def _share(x: float) -> str:
    return f"{100 * x:g}%"


def health_line(record: Any) -> str:
    """``madara show``'s line: the status and each stage's imputed of its scores (``record``: a CellRecord)."""
    health: Health = record.health
    where = "" if health.recorded else " (derived from a record written before madara recorded health)"
    if health.status == UNKNOWN:
        return f"health: unknown: the record does not say how many scores were read{where}"
    if not health.stages:
        return f"health: ok: no scores to read (the strategy assesses no documents){where}"
    stages = ", ".join(
        f"{s.stage} {s.imputed}/{s.scores} imputed"
        + "".join(f" ({n} {what})" for n, what in ((s.cut_at_max_tokens, "cut at the token budget"), (s.missing_id, "missing an id")) if n)
        for s in health.stages
    )
    verdict = f"degraded: {health.reason}" if health.degraded else f"ok (no stage over {_share(health.max_imputed)} imputed)"
    return f"health: {verdict}. Stages: {stages}{where}"

