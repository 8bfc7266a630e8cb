"""Structured configs (dataclass schemas in Hydra's ConfigStore) and compose helpers.

``configs/config.yaml`` starts its defaults list with ``base_config`` (the
:class:`RootConfig` schema below), so every group option is validated against its
dataclass at composition: a misspelt key or a wrong type fails with a clear message
instead of being silently ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

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


def _packaged_configs() -> Path | None:
    """The copy of ``configs/`` that ships inside the wheel (``madara_cli/configs``)."""
    from importlib.resources import files

    try:
        d = Path(str(files("madara_cli") / "configs"))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - zipped installs
        return None
    return d if (d / "config.yaml").is_file() else None


def config_dir() -> Path:
    """The shipped configs, first of: ``$MADARA_CONFIGS``, the checkout's ``configs/``
    (editable installs, ``PYTHONPATH=.``), the copy packaged in the wheel."""
    env = os.environ.get("MADARA_CONFIGS")
    if env:
        d = Path(env).expanduser()
        if not (d / "config.yaml").is_file():
            raise ConfigError(f"MADARA_CONFIGS={env} has no config.yaml (point it at a configs/ folder)")
        return d
    checkout = Path(__file__).resolve().parent.parent / "configs"
    if (checkout / "config.yaml").is_file():
        return checkout
    packaged = _packaged_configs()
    if packaged is None:
        raise ConfigError(f"no configs found at {checkout} nor in the installed package (set MADARA_CONFIGS to a configs/ folder)")
    return packaged


def user_config_dirs() -> list[Path]:
    """Folders added with ``--config-dir DIR`` (``$MADARA_CONFIG_DIR``, ``os.pathsep``-separated),
    searched before the shipped configs: their group options add to or replace the shipped ones."""
    dirs = [Path(p).expanduser() for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p.strip()]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"--config-dir {d}: no such folder")
    return dirs


def add_config_dir(path: str | Path) -> None:
    """``--config-dir DIR``: kept in the environment so launcher workers see it too."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise ConfigError(f"--config-dir {path}: no such folder")
    current = [p for p in os.environ.get("MADARA_CONFIG_DIR", "").split(os.pathsep) if p]
    os.environ["MADARA_CONFIG_DIR"] = os.pathsep.join([*current, str(d)])


def search_dirs() -> list[Path]:
    """User config folders first, then the shipped configs."""
    return [*user_config_dirs(), config_dir()]


def find_config(group: str, name: str) -> Path | None:
    """``<group>/<name>.yaml`` from the first search folder that has it."""
    for d in search_dirs():
        if (d / group / f"{name}.yaml").is_file():
            return d / group / f"{name}.yaml"
    return None


def options(group: str) -> list[str]:
    return sorted({p.stem for d in search_dirs() if (d / group).is_dir() for p in (d / group).glob("*.yaml")})


def validate_overrides(overrides: list[str]) -> None:
    """Fail with one line on a malformed override or an unknown group option."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:  # OverrideParseException and friends
        first = str(e).strip().splitlines()[0]
        raise ConfigError(f"malformed override: {first}") from None
    for o in parsed:
        key = o.key_or_group
        if key == "grid":
            raise ConfigError("run a grid with --grid NAME; valid grids: " + ", ".join(options("grid")))
        if key in GROUPS and not o.is_sweep_override():
            value = o.value()
            valid = options(key)
            if value not in valid:
                raise ConfigError(f"unknown {key} '{value}'; valid {plural(key)}: {', '.join(valid)}")


def _no_sweeps(overrides: list[str]) -> None:
    """One config at a time: a sweep (``key=a,b``) here gets a hint instead of Hydra's
    multi-line "Ambiguous value"."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for text, o in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if o.is_sweep_override():
            raise ConfigError(f"'{text}' is a sweep: run it with madara run -m {text} (or --grid); for a list value write {o.key_or_group}=[...]")


_PRIMARY_COPIES: dict[str, str] = {}


def _primary_and_searchpath() -> tuple[str, list[str]]:
    """Hydra's primary config folder and the ``hydra.searchpath`` override that puts the
    ``--config-dir`` folders ahead of the shipped configs. Hydra remembers a primary
    config it did not find before the search path grew, so with user folders the
    primary is a scratch folder holding only the first ``config.yaml`` found."""
    users = user_config_dirs()
    if not users:
        return str(config_dir().resolve()), []
    root = next(d for d in search_dirs() if (d / "config.yaml").is_file()) / "config.yaml"
    key = str(root.resolve())
    if key not in _PRIMARY_COPIES or not Path(_PRIMARY_COPIES[key], "config.yaml").is_file():
        import tempfile

        tmp = tempfile.mkdtemp(prefix="madara-configs-")
        Path(tmp, "config.yaml").write_text(root.read_text(encoding="utf-8"), encoding="utf-8")
        _PRIMARY_COPIES[key] = tmp
    paths = ",".join("file://" + str(d.resolve()) for d in search_dirs())
    return _PRIMARY_COPIES[key], [f"hydra.searchpath=[{paths}]"]


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``configs/config.yaml`` with Hydra overrides, validated and resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from madara_cli.validate import check_override_types, validate_config

    overrides = list(overrides or [])
    validate_overrides(overrides)
    check_override_types(overrides, RootConfig, ConfigError)
    _no_sweeps(overrides)
    register_schemas()
    GlobalHydra.instance().clear()
    try:
        primary, extra = _primary_and_searchpath()
        with initialize_config_dir(config_dir=primary, version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[*extra, *overrides])
        OmegaConf.resolve(cfg)
        cfg.overrides = list(overrides)
    except (HydraException, OmegaConfBaseException) as e:
        msg = " ".join(str(e).split("\n")[0].split())
        raise ConfigError(f"bad config: {msg} (keys: {', '.join(RootConfig.__dataclass_fields__)})") from None
    validate_config(cfg, ConfigError)  # ranges and choices, before any data or model loads
    return cfg


def load_grid(name: str) -> GridConfig:
    path = find_config("grid", name)
    if path is None:
        raise ConfigError(f"unknown grid '{name}'; valid grids: {', '.join(options('grid'))}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(GridConfig), OmegaConf.load(path))
    except Exception as e:  # noqa: BLE001 - any YAML/schema error is the user's to fix
        raise ConfigError(f"bad grid {path.name}: {' '.join(str(e).split())}") from None
    grid: GridConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    if grid.kind not in ("cells", "probes"):
        raise ConfigError(f"grid {name}: unknown kind '{grid.kind}'; valid kinds: cells, probes")
    for group, values in grid.axes.items():
        if group not in GROUPS:
            raise ConfigError(f"grid {name}: unknown axis '{group}'; valid axes: {', '.join(GROUPS)}")
        bad = [v for v in values if v not in options(group)]
        if bad:
            raise ConfigError(f"grid {name}: unknown {group} {bad}; valid: {', '.join(options(group))}")
    return grid


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
