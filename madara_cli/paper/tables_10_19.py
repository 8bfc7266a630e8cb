"""Tables 10-19 of the paper as printed (see :mod:`madara_cli.paper` for the
conventions), then the figures the text prints outside numbered tables (Appendix M's
Token F1, §4.1's polarization, Appendix B's ATF behaviour, Appendix H's floor,
Appendix J's hop support)."""

from __future__ import annotations

from typing import NamedTuple

from madara_cli.paper.study import flatten

# --- Table 10: per-query Spearman rho on CONFLICTS (mean, std per level) -------------------
# (model, "conflicts", level) -> (mean, std); levels rho1 = Shuffled, rho2 = Contradicted, rho3 = Random.
TABLE10_COLUMNS = ("rho1", "rho2", "rho3")
TABLE10 = flatten(
    TABLE10_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): ((0.72, 0.24), (0.38, 0.42), (-0.01, 0.36)),
        ("mistral-7b", "conflicts"): ((0.29, 0.42), (0.18, 0.45), (0.08, 0.34)),
        ("qwen3-8b", "conflicts"): ((0.30, 0.37), (0.03, 0.51), (0.16, 0.36)),
        ("qwen2.5-7b", "conflicts"): ((0.54, 0.33), (-0.20, 0.49), (0.09, 0.36)),
        ("gemma-2-9b", "conflicts"): ((0.73, 0.26), (0.44, 0.42), (0.30, 0.33)),
    },
)
TABLE10_GROUPS = {
    "llama-3.1-8b": "quality-ordered", "mistral-7b": "quality-ordered", "qwen3-8b": "stochastic", "qwen2.5-7b": "stochastic", "gemma-2-9b": "stochastic"
}

# --- Table 11: split-half and 30-query subset stability -----------------------------------
TABLE11_COLUMNS = ("first_half", "last_half", "subsets_quality_ordered_pct", "subsets_stochastic_pct")
TABLE11 = flatten(
    TABLE11_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): ("quality-ordered", "quality-ordered", 100, 0),
        ("llama-3.1-8b", "fever"): ("quality-ordered", "quality-ordered", 100, 0),
        ("mistral-7b", "conflicts"): ("quality-ordered", "quality-ordered", 62, 38),
        ("mistral-7b", "fever"): ("quality-ordered", "stochastic", 81, 19),
        ("qwen3-8b", "conflicts"): ("stochastic", "stochastic", 15, 85),
        ("qwen3-8b", "fever"): ("quality-ordered", "quality-ordered", 96, 4),
    },
)

# --- Table 12: RSC vs entropy routing, per pair ---------------------------------------------
TABLE12_COLUMNS = ("rsc_class", "entropy", "rec_rsc", "rec_entropy", "em_rsc", "em_entropy", "oracle", "oracle_em")
TABLE12 = flatten(
    TABLE12_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): ("quality-ordered", 0.75, "cot", "sda", 16.5, 19.4, "three_agent", 24.1),
        ("mistral-7b", "conflicts"): ("quality-ordered", 0.91, "cot", "sda", 22.8, 20.3, "cot", 22.8),
        ("qwen3-8b", "conflicts"): ("stochastic", 0.84, "sda", "sda", 63.0, 63.0, "sda_cot", 63.9),
        ("qwen2.5-7b", "conflicts"): ("stochastic", 0.82, "sda", "sda", 65.4, 65.4, "sda", 65.4),
        ("gemma-2-9b", "conflicts"): ("stochastic", 0.85, "sda", "sda", 63.3, 63.3, "three_agent", 64.6),
        ("llama-3.1-8b", "fever"): ("quality-ordered", 0.89, "cot", "sda", 88.4, 88.2, "sda_cot", 88.5),
        ("mistral-7b", "fever"): ("quality-ordered", 0.80, "cot", "sda", 92.6, 90.7, "cot", 92.6),
        ("qwen3-8b", "fever"): ("quality-ordered", 0.58, "cot", "cot", 89.5, 89.5, "sda", 90.0),
        ("qwen2.5-7b", "fever"): ("quality-ordered", 0.44, "cot", "cot", 87.5, 87.5, "sda", 90.5),
        ("gemma-2-9b", "fever"): ("quality-ordered", 0.61, "cot", "cot", 92.5, 92.5, "sda_cot", 92.7),
    },
)
# Summary rows: (RSC, entropy) as (count, out of); agreement has one value.
TABLE12_SUMMARY = {"beats_nf": ((8, 10), (7, 10)), "beats_three_agent": ((5, 10), (4, 10)), "matches_oracle": ((3, 10), (1, 10)), "agreement": ((6, 10), None)}
ENTROPY_THRESHOLD = 0.7  # Appendix I: entropy > 0.7 -> SDA, else CoT

# --- Table 13: bootstrap 95% CIs on rho_hat_k and classification stability ----------------
# rho_k -> (point, CI low, CI high); stability in %.
TABLE13_COLUMNS = ("rho1", "rho2", "rho3", "stability")
TABLE13 = flatten(
    TABLE13_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): ((0.76, 0.71, 0.80), (0.43, 0.35, 0.51), (0.08, 0.01, 0.14), 100),
        ("mistral-7b", "conflicts"): ((0.35, 0.27, 0.43), (0.22, 0.13, 0.30), (0.18, 0.12, 0.24), 79),
        ("qwen3-8b", "conflicts"): ((0.39, 0.30, 0.48), (0.04, -0.07, 0.15), (0.14, 0.03, 0.23), 95),
        ("qwen2.5-7b", "conflicts"): ((0.54, 0.47, 0.61), (-0.20, -0.30, -0.10), (0.09, 0.02, 0.16), 100),
        ("gemma-2-9b", "conflicts"): ((0.73, 0.68, 0.79), (0.44, 0.36, 0.53), (0.30, 0.23, 0.36), 100),
        ("llama-3.1-8b", "fever"): ((0.65, 0.56, 0.75), (0.49, 0.36, 0.60), (0.10, 0.00, 0.19), 100),
        ("mistral-7b", "fever"): ((0.28, 0.19, 0.37), (0.09, -0.01, 0.19), (0.01, -0.08, 0.11), 93),
        ("qwen3-8b", "fever"): ((0.63, 0.54, 0.70), (0.51, 0.41, 0.61), (0.14, 0.04, 0.23), 100),
        ("qwen2.5-7b", "fever"): ((0.64, 0.57, 0.71), (0.16, 0.03, 0.29), (0.07, -0.04, 0.18), 92),
        ("gemma-2-9b", "fever"): ((0.58, 0.40, 0.60), (0.36, 0.24, 0.49), (0.09, -0.03, 0.21), 100),
    },
)
TABLE13_MARKS = {("qwen3-8b", "conflicts"): "†", ("qwen2.5-7b", "conflicts"): "†", ("gemma-2-9b", "conflicts"): "†‡"}
TABLE13_N_RESAMPLES = 1_000


# --- Table 14: McNemar tests vs baseline ------------------------------------------------------
class McNemarRow(NamedTuple):
    """One printed row of Table 14. ``p_value`` is the printed string."""

    section: str  # "scoring" | "pde" (Holm families are corrected separately)
    benchmark: str
    model: str
    method: str
    base: str
    method_em: float
    base_em: float
    b: int
    c: int
    p_value: str
    sig: str


TABLE14: tuple[McNemarRow, ...] = (
    McNemarRow("scoring", "conflicts", "llama-3.1-8b", "three_agent", "nf", 24.1, 13.9, 36, 12, "0.001", "***"),
    McNemarRow("scoring", "conflicts", "mistral-7b", "cot", "nf", 22.8, 18.1, 14, 11, "0.689", ""),
    McNemarRow("scoring", "conflicts", "qwen3-8b", "sda_cot", "nf", 63.9, 60.8, 20, 15, "0.499", ""),
    McNemarRow("scoring", "conflicts", "qwen2.5-7b", "sda", "nf", 65.4, 59.9, 23, 10, "0.037", ""),
    McNemarRow("scoring", "conflicts", "gemma-2-9b", "three_agent", "nf", 64.6, 60.8, 20, 11, "0.151", ""),
    McNemarRow("scoring", "fever", "mistral-7b", "cot", "nf", 92.6, 90.7, 14, 9, "0.405", ""),
    McNemarRow("scoring", "fever", "qwen3-8b", "sda", "nf", 90.0, 89.6, 14, 12, "0.845", ""),
    McNemarRow("scoring", "fever", "qwen2.5-7b", "sda", "nf", 90.5, 87.1, 30, 11, "0.005", "**"),
    McNemarRow("scoring", "fever", "gemma-2-9b", "sda_cot", "nf", 92.7, 92.2, 14, 11, "0.689", ""),
    McNemarRow("pde", "conflicts", "llama-3.1-8b", "pde", "nf", 50.2, 13.9, 97, 11, "2.4e-18", "***"),
    McNemarRow("pde", "conflicts", "llama-3.1-8b", "pde", "three_agent", 50.2, 24.1, 73, 11, "9.3e-12", "***"),
    McNemarRow("pde", "conflicts", "mistral-7b", "pde", "nf", 43.5, 18.1, 69, 9, "1.4e-12", "***"),
    McNemarRow("pde", "conflicts", "mistral-7b", "pde", "three_agent", 43.5, 18.6, 64, 7, "7.7e-12", "***"),
)
# Effect sizes quoted under Table 14: b/c = 97/11 = 8.8 (Llama), 69/9 = 7.7 (Mistral).
TABLE14_ODDS = {("llama-3.1-8b", "pde", "nf"): 8.8, ("mistral-7b", "pde", "nf"): 7.7}

# --- Table 15: CONFLICTS NF vs PDE across model scales ------------------------------------
TABLE15_COLUMNS = ("params", "nf", "pde", "gain", "stars", "group")
TABLE15 = flatten(
    TABLE15_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): ("8B", 13.9, 50.2, 36.3, "***", "weak"),
        ("mistral-7b", "conflicts"): ("7B", 18.1, 43.5, 25.4, "***", "weak"),
        ("qwen2.5-7b", "conflicts"): ("7B", 59.9, 58.6, -1.3, "", "strong"),
        ("qwen3-8b", "conflicts"): ("8B", 60.8, 58.6, -2.2, "", "strong"),
        ("gemma-2-9b", "conflicts"): ("9B", 60.8, 59.9, -0.9, "", "strong"),
        ("qwen2.5-14b", "conflicts"): ("14B", 58.2, 61.2, 3.0, "", "strong"),
        ("gemma-2-27b", "conflicts"): ("27B", 62.9, 62.0, -0.9, "", "strong"),
        ("qwen2.5-32b", "conflicts"): ("32B", 61.2, 62.0, 0.8, "", "strong"),
    },
)
TABLE15_MODELS = ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "qwen3-8b", "gemma-2-9b", "qwen2.5-14b", "gemma-2-27b", "qwen2.5-32b")
TABLE15_EXTENDED = ("qwen2.5-14b", "gemma-2-27b", "qwen2.5-32b")  # marked † (extended models)
# group -> (NF, PDE, gain)
TABLE15_AVERAGES = {"weak": (16.0, 46.9, 30.9), "strong": (60.6, 60.4, -0.3)}

# --- Table 16: dense retrieval (Contriever top-10) on TriviaQA, N = 500 ---------------------
TABLE16_COLUMNS = ("nf", "pde", "gain")
TABLE16 = flatten(
    TABLE16_COLUMNS,
    {
        ("llama-3.1-8b", "triviaqa"): (34.6, 55.4, 20.8),
        ("mistral-7b", "triviaqa"): (38.4, 41.8, 3.4),
        ("qwen3-8b", "triviaqa"): (38.8, 44.4, 5.6),
        ("qwen2.5-7b", "triviaqa"): (44.0, 47.6, 3.6),
        ("gemma-2-9b", "triviaqa"): (55.0, 57.4, 2.4),
    },
)
TABLE16_AVERAGE = {"nf": 42.9, "pde": 49.1, "gain": 6.2}
TABLE16_SPEARMAN = -0.90  # between NF and PDE gain

# --- Table 17: MuSiQue chain coverage (Qwen2.5-7B, EM %) ------------------------------------
# subset -> (n, NF, 3-Agent, PDE)
TABLE17 = {"all": (100, 14.0, 30.0, 24.0), "chain_complete": (23, 13.0, 39.1, 34.8), "chain_broken": (77, 14.3, 27.3, 20.8)}
# Appendix J text: number of supporting paragraphs in PDE's top-5 -> (PDE EM, 3-Agent EM).
TABLE17_BY_SUPPORT = {0: (0.0, 0.0), 1: (21.4, 28.6), 2: (40.0, 48.6)}

# --- Table 18: cross-encoder reranking vs NF (EM %) and LLM call costs ----------------------
# (model, benchmark, column) with columns nf, cross_encoder (CE), delta.
TABLE18_COLUMNS = ("nf", "cross_encoder", "delta")
TABLE18_MODELS = ("mistral-7b", "llama-3.1-8b", "qwen3-8b", "qwen2.5-7b", "gemma-2-9b")  # printed order
TABLE18 = {
    (model, benchmark, column): value
    for model, values in {
        "mistral-7b": (18.1, 16.0, -2.1, 90.7, 91.3, 0.5),
        "llama-3.1-8b": (13.9, 9.3, -4.6, 88.7, 88.9, 0.2),
        "qwen3-8b": (60.8, 65.0, 4.2, 89.6, 90.2, 0.6),
        "qwen2.5-7b": (59.9, 64.1, 4.2, 87.1, 89.8, 2.7),
        "gemma-2-9b": (60.8, 63.3, 2.5, 92.2, 93.3, 1.1),
    }.items()
    for (benchmark, column), value in zip([(b, c) for b in ("conflicts", "fever") for c in TABLE18_COLUMNS], values, strict=True)
}
TABLE18_AVERAGE = {
    ("conflicts", "nf"): 42.7, ("conflicts", "cross_encoder"): 43.5, ("conflicts", "delta"): 0.9,
    ("fever", "nf"): 89.7, ("fever", "cross_encoder"): 90.7, ("fever", "delta"): 1.0,
}
# Notes under Table 18: LLM calls per query (d = 10 documents generated from under PDE).
PDE_D = 10
TABLE18_CALLS = {"nf": 1, "three_agent": 19, "cot": 19, "sda": 19, "atf": 19 + 1, "pde": 19 + PDE_D, "pde_random": PDE_D}
TABLE18_CALLS_PRINTED = {
    "nf": "1 gen.", "three_agent": "≈ 19", "cot": "≈ 19", "sda": "≈ 19",
    "atf": "≈ 19 + 1 gen.", "pde": "≈ 19 + d gen. (d=10)", "pde_random": "d gen. (no assessment)",
}

# --- Table 19: oracle gap of NF-only vs RSC-based routing (pp) -----------------------------
# (model, benchmark) -> (NF-only gap, RSC-based gap)
TABLE19_COLUMNS = ("nf_only", "rsc_based")
TABLE19 = flatten(
    TABLE19_COLUMNS,
    {
        ("llama-3.1-8b", "conflicts"): (0.0, 0.0),
        ("llama-3.1-8b", "fever"): (3.1, 0.0),
        ("mistral-7b", "conflicts"): (0.0, 0.0),
        ("mistral-7b", "fever"): (0.7, 0.0),
        ("qwen3-8b", "conflicts"): (0.5, 0.9),
        ("qwen3-8b", "fever"): (1.1, 0.0),
        ("qwen2.5-7b", "conflicts"): (0.4, 0.0),
        ("qwen2.5-7b", "fever"): (1.6, 2.3),
        ("gemma-2-9b", "conflicts"): (0.0, 1.3),
        ("gemma-2-9b", "fever"): (0.5, 0.0),
    },
)
TABLE19_MEANS = {"conflicts": (0.18, 0.44), "fever": (1.40, 0.46), "overall": (0.79, 0.45)}

# --- Appendix M: Token F1 quoted in the text (Table G.1 itself is not in the text) --------
APPENDIX_M_F1 = {("llama-3.1-8b", "nf"): 0.256, ("llama-3.1-8b", "pde"): 0.560}
APPENDIX_M_SELF_CONSISTENCY = (-8.6, -12.7)  # pp range on CONFLICTS


# --- Appendix analyses printed in the text (not in numbered tables) ------------------------

# §4.1 / Appendix N: share of agent scores at 0 or 5 (%), base prompts vs CoT prompts.
POLARIZATION = {("mistral-7b", "conflicts"): (80.8, 3.5)}

# Appendix B, "ATF filtering behavior": Qwen2.5-7B on CONFLICTS (458 queries).
ATF_BEHAVIOUR = {("qwen2.5-7b", "conflicts"): {"keep_all_pct": 83.6, "mu": 2.38, "mean_kept": 4.8, "n": 458}}

# Appendix H, "The Absolute Capability Floor": Llama-2-13b (preliminary tests; CONFLICTS assumed).
CAPABILITY_FLOOR = {("llama-2-13b", "conflicts"): {"nf": 2.1, "pde": 7.6}}

# Appendix J: fraction of gold supporting paragraphs in PDE's selected top-5 by hop count
# (Qwen2.5-7B, 100 MuSiQue queries); the text prints the 2-hop and 4-hop ends only.
HOP_SUPPORT = {("qwen2.5-7b", "musique"): {2: 0.57, 3: None, 4: 0.33}}
