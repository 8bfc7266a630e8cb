"""The study's set-up as the paper prints it: the paper's names for models,
benchmarks, strategies and RSC classes; the core models and routed pairs; the query
counts and routing thresholds it states; and the helpers that flatten a printed row
into ``(model, benchmark, column)`` keys and read one back."""

from __future__ import annotations

from typing import Any

# --- names -----------------------------------------------------------------------------

MODEL_LABELS: dict[str, str] = {
    "llama-2-13b": "Llama-2-13B", "llama-3.1-8b": "Llama-3.1-8B", "mistral-7b": "Mistral-7B-v0.3", "qwen3-8b": "Qwen3-8B",
    "qwen2.5-7b": "Qwen2.5-7B", "gemma-2-9b": "Gemma-2-9B", "qwen2.5-14b": "Qwen2.5-14B", "gemma-2-27b": "Gemma-2-27B",
    "qwen2.5-32b": "Qwen2.5-32B", "smollm2-135m": "SmolLM2-135M",
}
BENCHMARK_LABELS: dict[str, str] = {
    "conflicts": "Conflicts", "conflictqa": "ConflictQA", "fever": "FEVER", "triviaqa": "TriviaQA", "musique": "MuSiQue", "mini": "Mini"
}
STRATEGY_LABELS: dict[str, str] = {
    "nf": "NF", "three_agent": "3-Agent", "cot": "CoT", "sda": "SDA", "sda_cot": "SDA+CoT", "atf": "ATF", "pde": "PDE",
    "pde_random": "PDE-Random", "pde_uniform": "PDE-Uniform", "rrf": "RRF", "self_consistency": "Self-Consistency",
    "main_rag": "MAIN-RAG", "cross_encoder": "CE", "madara": "MADARA",
}
CLASS_LABELS: dict[str, str] = {"quality-ordered": "Quality-Ordered", "stochastic": "Stochastic", "degenerate": "Degenerate"}

# The five 7B-9B models of the main study, in the paper's row order.
CORE_MODELS: tuple[str, ...] = ("llama-3.1-8b", "mistral-7b", "qwen3-8b", "qwen2.5-7b", "gemma-2-9b")
# The ten model-task pairs of Tables 2, 8, 12, 13 and 19 (CONFLICTS and FEVER).
ROUTING_PAIRS: tuple[tuple[str, str], ...] = tuple((m, b) for m in CORE_MODELS for b in ("conflicts", "fever"))

# Query counts the paper states: CONFLICTS 458 (Appendix B, "Qwen2.5-7B, 458 queries"),
# RSC probe n = 100 (Section 5.5), MuSiQue 100 (Section 6.5), dense TriviaQA N = 500 (Table 16).
N_CONFLICTS = 458
N_PROBE = 100
N_MUSIQUE = 100
N_TRIVIAQA_DENSE = 500

# Routing thresholds (Section 5.5): rho* = -1.0, rho1_hat = 0.5, tau_NF = 30 %.
TAU_NF = 30.0
TAU_RHO1 = 0.5


def flatten(columns: tuple[str, ...], rows: dict[tuple[str, str], tuple[Any, ...]]) -> dict[tuple[str, str, str], Any]:
    """{(model, benchmark): (v1, v2, ...)} -> {(model, benchmark, column): v}."""
    for pair, values in rows.items():
        if len(values) != len(columns):
            raise ValueError(f"row {pair} has {len(values)} values for {len(columns)} columns")
    return {(*pair, column): value for pair, values in rows.items() for column, value in zip(columns, values, strict=True)}


def lookup(table: dict[tuple[str, str, str], Any], model: str, benchmark: str, column: str) -> Any:
    """``table[(model, benchmark, column)]``; meant for ``functools.partial`` over one row."""
    return table[(model, benchmark, column)]
