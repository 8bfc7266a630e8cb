"""A cell's assessment statistics for ``metrics.json``: parse failures and
polarization (Section 4.1: 80.8% -> 3.5% extreme scores with CoT)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from madara_cli.agents.matrix import ScoreMatrix
from madara_cli.agents.prompts import AGENTS


def _near(values: np.ndarray, target: float) -> np.ndarray:
    """``np.isclose(values, target)`` at its default tolerances, for a finite ``target``:
    the same comparison, without its checks and broadcasting (a cell's report asks it
    eight times over a handful of scores, where those were most of the cost)."""
    return np.abs(values - target) <= 1e-08 + 1e-05 * abs(target)


def _stats(values: np.ndarray, failed: np.ndarray) -> dict[str, Any]:
    n = int(failed.size)
    valid = values[~failed]
    extreme = _near(valid, 0.0) | _near(valid, 5.0)
    return {
        "n_scores": n,
        "n_valid": int(valid.size),
        "parse_failure_rate": float(failed.sum()) / n if n else 0.0,
        "extreme_score_rate": float(extreme.mean()) if valid.size else None,
        "mean_score": float(valid.mean()) if valid.size else None,
    }


def assessment_report(mats: Sequence[ScoreMatrix], cot: bool = False, mode: str = "generate") -> dict[str, Any]:
    """Per-cell assessment statistics for ``metrics.json``.

    ``parse_failure_rate``: failed / requested scores. ``extreme_score_rate``: share
    of valid scores equal to 0 or 5 on the matrix scale (the paper's polarization;
    a Conflict Detector adjustment of -2/+2 counts, as it maps to 0/5).
    ``mean_score``: mean valid score. The same per agent under ``by_agent``, failure
    reasons under ``failures``; under ``conflict`` how the detector was asked
    (``calls``), the agent replies read and, per query, the document numbers its
    replies left out (``missing_ids``, also failures) or that name no document. JSON-safe (``None`` where undefined, never NaN).
    """
    agents = mats[0].agents if mats else AGENTS
    values = np.concatenate([m.scores for m in mats if m.m] or [np.empty((0, len(agents)))])
    failed = np.concatenate([m.failed for m in mats if m.m] or [np.empty((0, len(agents)), dtype=bool)])
    report: dict[str, Any] = {"mode": mode, "cot": bool(cot), **_stats(values, failed)}
    reasons = Counter(r for m in mats for row in m.failure_reasons for r in row if r is not None)
    report["failures"] = dict(sorted(reasons.items()))
    report["by_agent"] = {a: _stats(values[:, j], failed[:, j]) for j, a in enumerate(agents)}
    # Replies, not scores: a per-query detector reply carries the whole column.
    replies = sum(m.m * len(agents) if m.conflict_calls == "per_document" else m.m * (len(agents) - 1) + int(m.m > 0) for m in mats)
    if mode == "generate":
        report["hit_max_tokens_rate"] = sum(m.hit_max_tokens for m in mats) / replies if replies else 0.0
    calls = sorted({m.conflict_calls for m in mats}) or ["per_document"]
    report["conflict"] = {"calls": calls[0] if len(calls) == 1 else calls, "replies": replies,
                          "missing_ids": sum(m.missing_ids for m in mats), "extra_ids": sum(m.extra_ids for m in mats)}
    if cot:
        with_steps = sum(1 for m in mats for row in m.reasoning for steps in row if steps)
        report["reasoning_rate"] = with_steps / failed.size if failed.size else 0.0
    return report
