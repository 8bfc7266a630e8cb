"""The words every floor shares: the three assessing agents and their requests' stage names
(sent by agents and strategies, read by accounting, health and the report)."""

from __future__ import annotations

RELEVANCE, CONSISTENCY, CONFLICT = "relevance", "consistency", "conflict"
AGENTS: tuple[str, str, str] = (RELEVANCE, CONSISTENCY, CONFLICT)
JUDGE_STAGE = "main-rag-judge"  # MAIN-RAG's Yes/No judge (strategies/main_rag.py sends it)


def stage_name(cot: bool, mode: str) -> str:
    """The stage the agents' scores are counted under: ``score``, ``score-cot`` or ``score-logprob``."""
    return "score-logprob" if mode == "logprob" else ("score-cot" if cot else "score")


def conflict_stage_name(cot: bool, mode: str) -> str:
    """The stage of the Conflict Detector's one request per query."""
    return stage_name(cot, mode) + "-conflict"
