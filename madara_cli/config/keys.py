"""The rules of a key: what of a composed config a cell's, probe's and snapshot's hash covers
(:mod:`madara_cli.config.identity` finishes each with the one digest): exactly what can change the
numbers (``runtime_only`` settings out, so a parallel run finds a serial one's cells), flattened as
summary.csv's columns. Each allowance keeping old keys in place is a :data:`SHIMS` row."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import OmegaConf

from madara_cli.config import plugin_schemas
from madara_cli.config.schema import ReadingConfig, RouterConfig, RouterPolicy
from madara_cli.config.settings import to_plain


def strategy_impl(node: Any) -> str:
    """The implementation a composed strategy node runs (``impl``, which compose keeps only where it differs from the label ``name``)."""
    impl = node["impl"] if "impl" in node.keys() else None  # not get or in: a struct config raises (and formats) a missing key inside
    return str(impl or node["name"])


# Old-key shims: every allowance that keeps keys of finished work where they were.


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
        "backend, retriever and benchmark nodes are laid over the settings every node carried before each option "
        "(each loader) had a schema",
        "per-option schemas for backends and retrievers; loader settings in each loader's spec (n_questions: mini's)",
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
    "content_keyed_inputs": Shim(
        "a cell or probe finished before local inputs were keyed by content (and before the hub commit keyed only "
        "the engines that load the hub) is found under its old key, and stands for the new one only when its record "
        "shows every input it read is the same: the GGUF's digest and the hub commit in its provenance; an input "
        "whose content it never recorded (benchmark.path, benchmark.corpus, retriever.index, a model folder, a "
        "pinned probe, an --include plug-in) makes it run anew, said in one line",
        "inputs keyed by content (benchmark.path, corpus, index, GGUF, model folders, plug-in sources)",
        "every cell of a model read from a GGUF would run again although nothing it read changed"),
    "cache_gguf_by_content": Shim(
        "a response-cache row written while a GGUF entered engine fingerprints by its file name and digest is found "
        "under that fingerprint and copied under today's (the digest alone)",
        "the response cache keyed by a GGUF's content, not its name",
        "every cached call of a llama.cpp engine, or of a vLLM or transformers engine made from a GGUF, would be paid again"),
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

# flat_plugin_defaults: what every backend / retriever / benchmark node carried before per-option schemas.
FLAT_KEY_DEFAULTS: dict[str, dict[str, Any]] = {
    "benchmark": {"n_questions": 60},
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
    """The model node as keys cover it on ``backend``: :func:`keyed`, less what only other backends read."""
    declared = plugin_schemas.backend_model_settings()
    others = {k for name, ks in declared.items() if name != backend for k in ks}
    return {k: v for k, v in keyed("model", values).items() if k not in others - set(declared.get(backend, ()))}


def reading_key(node: Any) -> dict[str, Any]:
    """The reading settings off their defaults (``{}`` for the paper's): what keys and summary.csv add."""
    defaults = {f.name: str(f.default) for f in fields(ReadingConfig)}
    values = dict(node or {})
    return {k: str(v) for k, v in values.items() if k in defaults and str(v) != defaults[k]}


# reading families whose off-default value computes otherwise than when first keyed (issue 36: the authors'
# unstopped re-score shown as their code shows it, their parser, chain fallback, unsplit shuffle): older work is not read back
READING_REVISIONS: dict[str, int] = {"requests": 2, "score_parser": 2, "conflict": 2, "chain_source": 2}


def reading_identity(node: Any) -> dict[str, Any]:
    """:func:`reading_key` as hashes cover it: a revised family's value carries its revision (``authors@2``); the paper's is ``{}``."""
    return {k: f"{v}@{READING_REVISIONS[k]}" if k in READING_REVISIONS else v for k, v in reading_key(node).items()}


def unkeyed(group: str, name: str) -> tuple[str, ...]:
    """The settings of ``group`` option ``name`` no key covers: runtime-only ones (and a shipped backend's old flat speed-only ones)."""
    names, flat = _FLAT_RUNTIME_ONLY.get(group, ((), ()))
    return plugin_schemas.runtime_only(group, name) + (flat if name in names else ())


def key_view(group: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of ``group`` as keys cover them: runtime-only settings out, the old flat defaults under."""
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
    reading = to_plain(cfg).get("reading") or {}
    if node.get("rescore") == "prefix" and node.get("rescoring") == "generate" and reading.get("score_parser") == "authors":
        node["prefix_read"] = "object"  # these re-scores were once read as 0 each: such probes are not reused
    return node


@dataclass(frozen=True)
class Fragments:
    """What only the floors above know of a cell or probe (gathered from the plug-ins' specs by :func:`madara_cli.config.identity.identify`)."""

    prompts: dict[str, str]  # the digest of each prompt family it sends
    metric_version: int | str
    # every local input it reads, "group.setting" -> input_digest(...): files by content
    inputs: dict[str, Any] = field(default_factory=dict)
    # input settings of the model node the engine does not read ("model.gguf" when served): in no key
    unread: tuple[str, ...] = ()
    hub_commit: str | None = None  # set only when the engine loads the hub and its cache knows the commit
    plugins: dict[str, str] = field(default_factory=dict)  # "kind:name" -> source digest (--include, entry points)
    # backend settings left to this machine, as they resolve here (device=auto: "cuda"), in the setting's place
    resolved: dict[str, str] = field(default_factory=dict)


def _content_keyed(out: dict[str, Any], fragments: Fragments) -> dict[str, Any]:
    """The rules that key local inputs by content (content_keyed_inputs)."""
    for dotted, value in fragments.inputs.items():
        group, _, name = dotted.partition(".")
        if isinstance(out.get(group), dict):
            out[group][name] = value
    for dotted in fragments.unread:  # left at null where unset: a key with nothing to drop stays put
        group, _, name = dotted.partition(".")
        if isinstance(out.get(group), dict) and out[group].get(name) is not None:
            out[group].pop(name)
    if fragments.hub_commit:
        out["model"]["revision"] = fragments.hub_commit
    if fragments.resolved and isinstance(out.get("backend"), dict):
        out["backend"].update(fragments.resolved)
    if fragments.plugins:
        out["plugins"] = dict(fragments.plugins)
    return out


def _cell_payload(cfg: Any, prompts: dict[str, str], metric_version: int | str, plain: dict[str, Any] | None = None) -> dict[str, Any]:
    plain = to_plain(cfg) if plain is None else plain
    backend = str(plain["backend"]["name"])
    out: dict[str, Any] = {}
    for group in SEMANTIC_GROUPS:
        values = key_view(group, plain[group]) if group in FLAT_KEY_DEFAULTS else plain[group]
        out[group] = model_keyed(values, backend) if group == "model" else keyed(group, values)
    out["strategy"] = {**FLAT_STRATEGY_DEFAULTS, **out["strategy"]}
    for name, default in MODEL_CHAT_DEFAULTS.items():
        if out["model"].get(name, default) == default:
            out["model"].pop(name, None)
    out["limit"], out["seed"] = plain.get("limit"), plain.get("seed")
    out.update(_probe_groups(cfg, plain))
    if reading := reading_identity(plain.get("reading")):
        out["reading"] = reading
    out["metric_version"] = metric_version
    out["prompts"] = dict(prompts)
    if out["strategy"].get("selection") == "random" and out["strategy"].get("vote") == "uniform":
        _drop_agent_settings(out)
    return out


def cell_identity(cfg: Any, fragments: Fragments, plain: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cell's hash covers: every setting that can change its numbers, limit, seed, metric version,
    prompt family digests, local inputs by content, the hub commit where its engine loads the hub, and
    non-shipped plug-ins' sources (``plain``: ``to_plain(cfg)``, unchanged)."""
    return _content_keyed(_cell_payload(cfg, fragments.prompts, fragments.metric_version, plain), fragments)


def path_keyed_cell_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str,
                             hub_commit: str | None = None, plain: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cell's hash covered before content_keyed_inputs: inputs as the strings naming them, the hub
    commit whenever the model's keyed source was the hub."""
    out = _cell_payload(cfg, prompts, metric_version, plain)
    if hub_commit and out["model"].get("hf_source", "hub") == "hub":
        out["model"]["revision"] = hub_commit
    return out


def probed(cfg: Any) -> bool:
    """Whether the cell's strategy runs behind a probe (it registered with the ``rsc`` key group: ``strategy=madara``)."""
    return "rsc" in plugin_schemas.key_groups("strategy", strategy_impl(cfg.strategy))


def _probe_groups(cfg: Any, plain: dict[str, Any]) -> dict[str, Any]:
    """The probe's and router's settings a probed cell's key covers (router_default, isolation_probe_off)."""
    groups = plugin_schemas.key_groups("strategy", strategy_impl(cfg.strategy))
    out: dict[str, Any] = {}
    if "rsc" in groups:
        out["rsc"] = rsc_key(cfg)
    if "router" in groups and plain.get("router") and plain["router"] != to_plain(OmegaConf.structured(RouterConfig)):
        out["router"] = dict(plain["router"])  # a copy: the payload is changed later, plain is shared
    return out


def _drop_agent_settings(out: dict[str, Any]) -> None:
    """pde_random_asks_no_agent: no detector setting, template or reply reading."""
    out["strategy"].pop("conflict", None)
    out["prompts"].pop("detector", None)
    if "reading" in out:
        for name in _AGENT_READINGS:
            out["reading"].pop(name, None)
        if set(out["reading"]) <= {"name"}:  # nothing left but the preset's label
            out.pop("reading")


def path_keyed_probe_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str) -> dict[str, Any]:
    """What a probe's hash covered before content_keyed_inputs (no hub commit at all)."""
    plain = to_plain(cfg)
    out: dict[str, Any] = {k: plain[k] for k in PROBE_GROUPS}
    out["rsc"] = rsc_key(cfg)
    out["generation"] = keyed("generation", out["generation"])
    if reading := reading_identity(plain.get("reading")):
        out["reading"] = reading
    out["backend"] = keyed("backend", key_view("backend", out["backend"]))
    out["model"] = model_keyed(out["model"], str(out["backend"]["name"]))
    out["retriever"] = key_view("retriever", out["retriever"])
    out["benchmark"] = keyed("benchmark", {k: v for k, v in key_view("benchmark", out["benchmark"]).items() if k not in ("calibration", "sample")})
    out["prompts"] = dict(prompts)
    out["metric_version"] = metric_version
    return out


def probe_identity(cfg: Any, fragments: Fragments) -> dict[str, Any]:
    """What a probe's hash covers: as :func:`cell_identity`, less the strategy and limit, with the
    probe's settings. The calibration split is the first n of the seeded order, so n (in the name) is all of it that counts."""
    return _content_keyed(path_keyed_probe_identity(cfg, fragments.prompts, fragments.metric_version), fragments)


def nested_settings(cfg: Any) -> dict[str, Any]:
    """summary.csv's columns: the keyed settings by group, limit, seed and a madara cell's ``rsc`` settings."""
    plain = to_plain(cfg)
    nested: dict = {g: {k: v for k, v in plain[g].items() if k not in unkeyed(g, str(plain[g].get("name")))} for g in SEMANTIC_GROUPS}
    nested["generation"] = keyed("generation", nested["generation"])
    if reading := reading_key(plain.get("reading")):
        nested["reading"] = reading
    nested["limit"], nested["seed"] = plain.get("limit"), plain.get("seed")
    nested.update(_probe_groups(cfg, plain))  # what the cell's key holds of them, so row and key agree
    return nested


def flatten(nested: dict[str, Any]) -> dict[str, Any]:
    """Dotted names (``strategy.top_k``, ``model.temperature``); lists as JSON text."""
    out: dict[str, Any] = {}
    for k, v in nested.items():
        if isinstance(v, dict):
            out.update({f"{k}.{name}": value for name, value in flatten(v).items()})
        else:
            out[k] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def flat_settings(cfg: Any) -> dict[str, Any]:
    """A cell's keyed settings from its config alone, flattened (no prompt digests or metric version: a stored config.yaml cannot say)."""
    return flatten(nested_settings(cfg))


def standing(provenance: dict[str, Any] | None, evidence: dict[str, str | None]) -> str | None:
    """Why a record under a legacy key cannot stand for the new one (a phrase), or None if it shows all ``evidence``."""
    model = (provenance or {}).get("model") or {}
    for what, want in evidence.items():
        if want is None:
            return f"its record cannot show that {what} is unchanged"
        if what == "model.gguf":
            got = str(model.get("gguf") or "").rsplit(":", 1)[-1]
            if got != want:
                return f"it read another GGUF ({got or 'unrecorded'}, now {want})"
        elif what == "model.commit":
            got = model.get("resolved_revision")
            if got != want:
                return f"it ran on hub commit {got or 'unrecorded'}, not {want}"
    return None
