"""What a cell, a probe and a retrieval snapshot *are*: the one room for their keys.

A key is a hash of exactly what can change the numbers: for a cell, the model, engine,
benchmark, retrieval, strategy and generation settings, the limit and seed, the metric
version and a digest of every prompt template the strategy sends (:func:`cell_identity`);
for a probe, the same less the strategy and limit, with the probe's own settings
(:func:`probe_identity`); for a snapshot, the benchmark, the retriever and the corpus
(:func:`snapshot_identity`). Settings that change only speed or placement (threads,
batch sizes, timeouts, GPU memory share, server address, output paths) are each
plug-in's ``runtime_only`` ones and stay out, so a parallel run finds the cells a
serial one wrote. The same settings, flattened, are summary.csv's columns
(:func:`nested_settings`, :func:`flatten`).

Keys must not move when a setting is added at the value that computes what every cell
computed before it: :data:`SHIMS` is every such allowance, each with what it keeps,
since when and why, in one table.

This module is in the bottom layer: what only a higher floor can know (the digests of
the rendered prompts, a hub revision's commit, the probe behind a routed cell) is
handed in by the caller (:func:`madara_cli.experiment.grid.semantic_config`,
:meth:`madara_cli.diagnose.probe.ProbeSpec.from_cfg`, :func:`madara_cli.retrievers.retrieval`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from omegaconf import OmegaConf

from madara_cli.config import plugin_schemas
from madara_cli.config.schema import ReadingConfig, RouterConfig, RouterPolicy


def to_plain(cfg: Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def strategy_impl(node: Any) -> str:
    """The implementation a composed strategy node runs (``impl``, which compose keeps
    only where it differs from the label ``name``)."""
    return str(node.get("impl") or node.name)


# --------------------------------------------------------------------------- #
# Old-key shims: every allowance that keeps keys of finished work where they were.
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Shim:
    what: str  # the allowance
    since: str  # the change that made it necessary
    why: str  # what would move without it


SHIMS: dict[str, Shim] = {
    "omit_at_old_value": Shim(
        "a setting added later is left out of every key at the value that computes what all cells computed before it",
        "benchmark.candidates, model.hf_source, backend.tokenizer_mode / dtype, generation.rescore_max_tokens",
        "each addition would otherwise move every cell, probe and snapshot key"),
    "flat_plugin_defaults": Shim(
        "backend and retriever nodes are laid over the settings every node carried before each option had a schema",
        "per-option schemas for backends and retrievers",
        "a node now holds only its own option's settings; constants cannot tell two cells apart"),
    "flat_runtime_only": Shim(
        "a shipped backend's node read from an old config.yaml may hold every backend's speed-only settings",
        "per-option schemas for backends",
        "summary columns and rebuilt keys of old cells would gain them"),
    "flat_strategy_defaults": Shim(
        "strategy nodes are laid over the settings every strategy node carried before each strategy had a schema",
        "per-strategy schemas",
        "every cell key would move; constants cannot tell two cells apart"),
    "model_chat_defaults": Shim(
        "model.chat_template_kwargs and model.system_role stay out at their defaults",
        "chat-template settings in the model schema",
        "every cell key would move; at the defaults they change nothing"),
    "backend_model_settings": Shim(
        "a model setting only some backends read is keyed only on those backends (model.hf_source: vLLM)",
        "vLLM's model sources (hub | gguf | folder)",
        "llama.cpp cells of a model would move whatever vLLM loads"),
    "paper_reading": Shim(
        "the reading settings enter keys only off the paper's reading",
        "the reading group (reading=paper | authors)",
        "reading=paper, the default, would move every key"),
    "router_default": Shim(
        "a madara cell's router settings enter its key only off the paper's policy at its thresholds",
        "router.policy=isolation",
        "every madara cell key would move"),
    "isolation_probe_off": Shim(
        "rsc.isolation_probe enters probe and madara keys only when the probe runs",
        "the isolation probe",
        "every probe key would move"),
    "pde_random_asks_no_agent": Shim(
        "PDE-Random's key holds no detector settings, templates or score readings",
        "the Conflict Detector settings and templates in madara keys",
        "editing how no agent it asks would be asked would move it"),
}

# omit_at_old_value: at these values (as text) a setting is not in the key.
KEY_OMITS_AT: dict[str, dict[str, Any]] = {
    "benchmark": {"candidates": "retrieved"},
    "model": {"hf_source": "hub"},
    "backend": {"tokenizer_mode": "hf", "dtype": "None"},
    "generation": {"rescore_max_tokens": "None"},
}

# flat_plugin_defaults: what every backend / retriever node carried before per-option schemas.
FLAT_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "backend": {"n_ctx": None, "served_model_name": None, "tokenizer": None},
    "retriever": {
        "k1": 0.9, "b": 0.4, "stemmer": "english", "stopwords": "en", "index": None, "encoder": None,
        "first_stage": "bm25s", "candidates": 50, "model": None,
    },
}

# flat_runtime_only: the speed-only settings a shipped backend's old flat node could hold.
_FLAT_RUNTIME_ONLY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "backend": (
        ("llamacpp", "vllm", "openai"),
        ("batch_size", "n_threads", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching",
         "base_url", "api_key_env", "max_in_flight", "retries", "timeout_s"),
    ),
}

# flat_strategy_defaults: what every strategy node carried before per-strategy schemas.
FLAT_STRATEGY_DEFAULTS: dict[str, Any] = {
    "top_k": 5, "weights": [0.4, 0.3, 0.3], "scoring": "generate", "cot": False, "kappa": 0.5, "min_keep": 2, "rrf_k": 60,
    "vote": "score", "selection": "assessed", "n_samples": 5, "main_rag_n": 0.0, "probe": None,
    "cross_encoder": "cross-encoder/ms-marco-MiniLM-L-12-v2",
}

# model_chat_defaults
MODEL_CHAT_DEFAULTS: dict[str, Any] = {"chat_template_kwargs": {}, "system_role": True}

# Root groups whose settings can change a cell's numbers.
SEMANTIC_GROUPS = ("model", "backend", "benchmark", "retriever", "strategy", "generation")
# What can change a probe's numbers; strategy, limit and output paths cannot.
PROBE_GROUPS = ("model", "backend", "benchmark", "retriever", "generation", "rsc", "seed")
# What of a benchmark node a snapshot does not depend on (the sample and calibration
# sizes pick from it; the data's own path and corpus enter as the corpus fingerprint).
SNAPSHOT_FORMAT = 1
_BENCHMARK_NOT_IN_SNAPSHOT = ("sample", "calibration", "path", "corpus")
# PDE-Random's reading settings that concern an agent it never asks (pde_random_asks_no_agent).
_AGENT_READINGS = ("conflict", "score_parser", "requests")


def keyed(group: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of config group ``group`` as a key covers them (omit_at_old_value)."""
    omit = KEY_OMITS_AT.get(group, {})
    return {k: v for k, v in values.items() if not (k in omit and str(v) == omit[k])}


def model_keyed(values: dict[str, Any], backend: str) -> dict[str, Any]:
    """The model node as keys cover it on ``backend``: :func:`keyed`, less the model
    settings that only other backends read (backend_model_settings)."""
    declared = plugin_schemas.backend_model_settings()
    others = {k for name, ks in declared.items() if name != backend for k in ks}
    return {k: v for k, v in keyed("model", values).items() if k not in others - set(declared.get(backend, ()))}


def reading_key(node: Any) -> dict[str, Any]:
    """The reading settings off their defaults (``{}`` for the paper's reading): what
    cell and probe keys and summary.csv add (paper_reading)."""
    defaults = {f.name: str(f.default) for f in fields(ReadingConfig)}
    values = dict(node or {})
    return {k: str(v) for k, v in values.items() if k in defaults and str(v) != defaults[k]}


# Reading families whose off-default value computes differently than when it was first
# keyed (issue 36: the authors' re-score sent without a stop string and shown as their
# code shows it, their parser reading unstopped replies as they came, their chain
# fallback and unsplit shuffle), so cells and probes made before are not read back.
READING_REVISIONS: dict[str, int] = {"requests": 2, "score_parser": 2, "conflict": 2, "chain_source": 2}


def reading_identity(node: Any) -> dict[str, Any]:
    """:func:`reading_key` as cell and probe hashes cover it: a revised family's value
    carries its revision (``authors@2``); the paper's reading is still ``{}``."""
    return {k: f"{v}@{READING_REVISIONS[k]}" if k in READING_REVISIONS else v for k, v in reading_key(node).items()}


def unkeyed(group: str, name: str) -> tuple[str, ...]:
    """The settings of ``group`` option ``name`` no key covers: its runtime-only ones (and,
    for a shipped backend, every speed-only setting a flat node of before could hold)."""
    names, flat = _FLAT_RUNTIME_ONLY.get(group, ((), ()))
    return plugin_schemas.runtime_only(group, name) + (flat if name in names else ())


def key_view(group: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of ``group`` as cell, probe and snapshot keys cover them: the
    option's runtime-only settings left out, the old flat defaults laid under."""
    skip = unkeyed(group, str(values.get("name")))
    return {**FLAT_KEY_DEFAULTS.get(group, {}), **{k: v for k, v in values.items() if k not in skip}}


def isolation_on(cfg: Any) -> bool:
    """Whether the probe measures the isolation gain: asked for, or needed by the routing policy."""
    rsc_node, router_node = cfg.get("rsc") or {}, cfg.get("router") or {}
    policy = str(router_node.get("policy", RouterPolicy.paper.value))
    return bool(rsc_node.get("isolation_probe", False)) or policy == RouterPolicy.isolation.value


def rsc_key(cfg: Any) -> dict[str, Any]:
    """The ``rsc`` settings as probe and madara-cell keys hash them (isolation_probe_off)."""
    node = dict(to_plain(cfg).get("rsc") or {})
    node.pop("isolation_probe", None)
    if isolation_on(cfg):
        node["isolation_probe"] = True
    return node


def digest(payload: dict[str, Any], length: int = 8) -> str:
    """The short hash that ends a key."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:length]


def cell_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str, hub_commit: str | None = None) -> dict[str, Any]:
    """What a cell's hash covers. ``prompts``: the digest of each template family the
    cell's strategy sends (its declared families); ``hub_commit``: the commit a hub
    revision names, where the local hub cache knows it (an update of the weights or the
    chat template then makes a new cell; a commit keys as itself)."""
    plain = to_plain(cfg)
    backend = str(plain["backend"]["name"])
    out: dict[str, Any] = {}
    for group in SEMANTIC_GROUPS:
        values = key_view(group, plain[group]) if group in FLAT_KEY_DEFAULTS else plain[group]
        out[group] = model_keyed(values, backend) if group == "model" else keyed(group, values)
    out["strategy"] = {**FLAT_STRATEGY_DEFAULTS, **out["strategy"]}
    for name, default in MODEL_CHAT_DEFAULTS.items():
        if out["model"].get(name, default) == default:
            out["model"].pop(name, None)
    if hub_commit and out["model"].get("hf_source", "hub") == "hub":
        out["model"]["revision"] = hub_commit
    out["limit"], out["seed"] = plain.get("limit"), plain.get("seed")
    out.update(_probe_groups(cfg, plain))
    reading = reading_identity(plain.get("reading"))
    if reading:
        out["reading"] = reading
    out["metric_version"] = metric_version
    out["prompts"] = dict(prompts)
    if out["strategy"].get("selection") == "random" and out["strategy"].get("vote") == "uniform":
        _drop_agent_settings(out)
    return out


def probed(cfg: Any) -> bool:
    """Whether the cell's strategy runs behind a probe (it declared the ``rsc`` group
    its key covers when it registered: ``strategy=madara``)."""
    return "rsc" in plugin_schemas.key_groups("strategy", strategy_impl(cfg.strategy))


def _probe_groups(cfg: Any, plain: dict[str, Any]) -> dict[str, Any]:
    """The probe's and router's settings a probed cell's key covers (router_default,
    isolation_probe_off)."""
    groups = plugin_schemas.key_groups("strategy", strategy_impl(cfg.strategy))
    out: dict[str, Any] = {}
    if "rsc" in groups:
        out["rsc"] = rsc_key(cfg)
    if "router" in groups and plain.get("router") and plain["router"] != to_plain(OmegaConf.structured(RouterConfig)):
        out["router"] = plain["router"]
    return out


def _drop_agent_settings(out: dict[str, Any]) -> None:
    """pde_random_asks_no_agent: no detector setting, template or reply reading."""
    out["strategy"].pop("conflict", None)
    out["prompts"].pop("detector", None)
    if "reading" in out:
        for name in _AGENT_READINGS:
            out["reading"].pop(name, None)
        if not out["reading"] or set(out["reading"]) == {"name"}:
            out["reading"].pop("name", None)
        if not out["reading"]:
            out.pop("reading")


def probe_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str) -> dict[str, Any]:
    """What a probe's hash covers (``prompts``: the generator, assessor and re-score
    template digests). The calibration split is the first n of the seeded order whatever
    the evaluated sample, so n (in the probe's key, beside the hash) is all that matters
    of the split sizes."""
    plain = to_plain(cfg)
    out: dict[str, Any] = {k: plain[k] for k in PROBE_GROUPS}
    out["rsc"] = rsc_key(cfg)
    out["generation"] = keyed("generation", out["generation"])
    reading = reading_identity(plain.get("reading"))
    if reading:
        out["reading"] = reading
    out["backend"] = keyed("backend", key_view("backend", out["backend"]))
    out["model"] = model_keyed(out["model"], str(out["backend"]["name"]))
    out["retriever"] = key_view("retriever", out["retriever"])
    out["benchmark"] = keyed("benchmark", {k: v for k, v in out["benchmark"].items() if k not in ("calibration", "sample")})
    out["prompts"] = dict(prompts)
    out["metric_version"] = metric_version
    return out


def snapshot_identity(benchmark: dict[str, Any], source: str, retriever: dict[str, Any], corpus: dict[str, Any] | None,
                      reranker: dict[str, Any] | None = None) -> dict[str, Any]:
    """The identity of a retrieval snapshot (:mod:`madara_cli.retrievers.snapshots`): the
    benchmark's keyed settings, where its questions come from, the retriever node as keys
    cover it (:func:`key_view`), the corpus fingerprint and the reranker's settings."""
    return {
        "format": SNAPSHOT_FORMAT,
        "benchmark": keyed("benchmark", {k: v for k, v in sorted(benchmark.items()) if k not in _BENCHMARK_NOT_IN_SNAPSHOT}),
        "source": source,
        "retriever": dict(sorted(key_view("retriever", retriever).items())),
        "corpus": corpus,
        "reranker": reranker,
    }


def nested_settings(cfg: Any) -> dict[str, Any]:
    """The keyed settings of ``cfg`` by group (runtime-only ones left out), plus limit,
    seed and, for a madara cell, the probe's ``rsc`` settings: summary.csv's columns."""
    plain = to_plain(cfg)
    nested: dict = {g: {k: v for k, v in plain[g].items() if k not in unkeyed(g, str(plain[g].get("name")))} for g in SEMANTIC_GROUPS}
    nested["generation"] = keyed("generation", nested["generation"])
    reading = reading_key(plain.get("reading"))
    if reading:
        nested["reading"] = reading
    nested["limit"], nested["seed"] = plain.get("limit"), plain.get("seed")
    nested.update(_probe_groups(cfg, plain))  # what the cell's key holds of them, so row and key agree
    return nested


def flatten(nested: dict[str, Any]) -> dict[str, Any]:
    """Dotted names (``strategy.top_k``, ``model.temperature``); lists as JSON text."""
    out: dict[str, Any] = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (list, tuple)) else v

    walk(nested, "")
    return out


def flat_settings(cfg: Any) -> dict[str, Any]:
    """The settings a cell's key covers from its config alone, flattened (no prompt
    digests and no metric version: a stored config.yaml cannot say which ran)."""
    return flatten(nested_settings(cfg))
