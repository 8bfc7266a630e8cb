"""What a cell, a probe and a retrieval snapshot *are*: the one room that finishes their keys.
The one hash (:func:`digest`) and files by content (:func:`input_digest`) end every key, the
response cache's included; every name a result is found under is made here; :func:`identify`
and :func:`identify_probe` make an identity once from a composed config, with the keys the
same cell had under rules since moved (``legacy``) and what an old record must show to stand
for it (``evidence``). What each key covers is :mod:`madara_cli.config.keys`'."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from madara_cli.config import plugin_schemas
from madara_cli.config.keys import (
    _BENCHMARK_NOT_IN_SNAPSHOT,
    SNAPSHOT_FORMAT,
    Fragments,
    cell_identity,
    flatten,
    key_view,
    keyed,
    nested_settings,
    path_keyed_cell_identity,
    path_keyed_probe_identity,
    probe_identity,
    strategy_impl,
    to_plain,
)
from madara_cli.config.plugin_schemas import schema_for
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import ModelConfig, loader_schema
from madara_cli.config.settings import Settings
from madara_cli.core import metrics
from madara_cli.core.held import held
from madara_cli.core.hub import resolved_revision
from madara_cli.core.paths import cache_root, inside
from madara_cli.core.records import ScoreRequest
from madara_cli.core.sidefiles import WHAT, file_stamp, regular_file, stamp_memo
from madara_cli.plugins.catalog import CATALOG

# The one digest, and local inputs by their content


def digest(payload: Any, length: int = 8, *, ascii: bool = True) -> str:
    """The one hash every key ends with: sha256 of ``payload`` as canonical JSON, cut to ``length`` hex
    digits. ``ascii=False``: non-ASCII text as itself (how snapshot names, prompt digests and cache keys were first made)."""
    return text_digest(json.dumps(payload, sort_keys=True, ensure_ascii=ascii), length)


def text_digest(text: str, length: int = 64) -> str:
    """:func:`digest`'s hash of text already made (a snapshot's question line, its ledger)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def request_key(fingerprint: str, request: Any) -> str:
    """The response cache's key: the engine's fingerprint and the canonical request (messages, sampling, seed)."""
    if type(request) is ScoreRequest:
        return _score_key(fingerprint, request)
    return digest({"model": fingerprint, "request": request.canonical()}, 64, ascii=False)


# Score requests carry no seed (a grid repeats them) and hold text alone, so equal ones are equal
# canonically: memoised by value (chat requests hold numbers, 1 == 1.0 == True with unlike JSON).
@functools.lru_cache(maxsize=4096)
def _score_key(fingerprint: str, request: ScoreRequest) -> str:
    return digest({"model": fingerprint, "request": request.canonical()}, 64, ascii=False)


def family_digest(requests: Any) -> str:
    """A prompt family's digest: its requests for the fixed sample (``prompt_sets.SAMPLE_EXAMPLES``),
    so an edit of a template or of a builder's glue moves it and nothing else does."""
    return digest([r.canonical() for r in requests], 16, ascii=False)


_FILE_DIGESTS: dict[str, tuple[tuple[int, ...], str]] = {}
DISK_MEMO_BYTES = 16 << 20  # from this size digests are kept on disk too (a 20 GB corpus is read once per machine)
MEMO_FILE = "file-digests.json"  # under madara's cache folder (paths.cache_root)


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, remembered against its stamp (ctime included, which ``touch -r``
    cannot put back) in the process and, for large files, on disk: an edit in place is always seen."""
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
    """sha256 over each regular file under a folder (relative path and bytes' digest, in name order;
    links to files followed, to folders not)."""
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
    """``dist:NAME``: the one file ending in ``suffix`` in installed distribution NAME (a wheel's GGUF), or None."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(value[len("dist:"):])
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [f for f in (dist.files or []) if str(f).endswith(suffix)]
    return Path(dist.locate_file(files[0])).resolve() if files else None


INDEX_MANIFEST = "madara_index.json"  # a saved index (madara index build) is keyed by it


def input_digest(value: Any, kind: str) -> Any:
    """What a key holds for a setting of input kind ``kind``: ``sha256:<16 hex>`` of its content (a
    folder's files; a saved index's manifest), ``missing:<value>`` when nothing is there (the load then
    fails in its own words), or ``value`` itself when it is no local path (a hub model, prebuilt index or ``dist:`` encoder name)."""
    if value is None or value == "":
        return value
    text = str(value)
    if kind == "model" and not Path(text).expanduser().is_dir():
        return text  # a hub model's name or a dist: wheel, as written
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
        commits = sorted(path.glob("segments_*")) if kind == "index" else []
        if commits:  # a Lucene index: its commit point and segment infos name every segment by id and checksum
            return f"lucene:{digest([[f.name, file_digest(f)] for f in (*commits, *sorted(path.glob('*.si')))], 16)}"
        return f"sha256:{folder_digest(path)[:16]}"
    if kind == "index" and "/" not in text and not text.startswith("."):
        return text  # a prebuilt index's name (pyserini's wikipedia-dpr-100w)
    return f"missing:{text}"


# Key names: every name a result is found under, written once


@dataclass(frozen=True)
class Cell:
    """One measurement of a grid: (model, benchmark, strategy, retriever, k, seed, limit)
    plus the hash of every setting and input that can change its numbers; ``key`` names its folder."""

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
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "config_hash"}, "key": self.key}

    def folder(self, results_dir: str | Path) -> Path:
        return inside(results_dir, Path(results_dir) / self.grid / self.key)


@dataclass(frozen=True)
class ProbeKey:
    """One RSC probe: (model, benchmark, calibration size) plus its hash; ``key`` names its folder under ``probes/``."""

    model: str
    benchmark: str
    n: int
    config_hash: str

    @property
    def key(self) -> str:
        return f"{self.model}__{self.benchmark}__n{self.n}__{self.config_hash}"

    def folder(self, results_dir: str | Path) -> Path:
        return inside(results_dir, Path(results_dir) / "probes" / self.key)

    def with_n(self, n: int) -> "ProbeKey":
        """The same probe on ``n`` calibration queries (the hash does not cover the calibration size, the name does)."""
        return replace(self, n=int(n))


def snapshot_name(key: dict[str, Any]) -> str:
    """A retrieval snapshot's file stem: benchmark, retriever, k and the digest of :func:`snapshot_identity`."""
    b, r = key["benchmark"].get("name", "benchmark"), key["retriever"]
    return f"{b}__{r.get('name', 'retriever')}-k{r.get('k', '')}__{digest(key, 16, ascii=False)}"


def index_name(settings: dict[str, Any], corpus_hash: str) -> str:
    """A saved corpus index's folder name: its kind, the corpus digest and its settings'."""
    return f"{settings['kind']}-{corpus_hash[:16]}-{digest(settings)}"


def _input_fields(schema: type | None) -> dict[str, str]:
    return {f.name: f.metadata["input"] for f in fields(schema) if f.metadata.get("input")} if schema else {}


def by_content(values: dict[str, Any], schema: type | None) -> dict[str, Any]:
    """``values`` with each setting that ``schema`` marks as a local input replaced by its content digest (:func:`input_digest`)."""
    return {**values, **{name: input_digest(values[name], kind) for name, kind in _input_fields(schema).items() if values.get(name)}}


def source_identity(benchmark: Any) -> str:
    """What rows a benchmark node reads (in every snapshot's key): ``benchmark.path`` by content, else
    its loader's key fragment, else hub id, config and split at the cached commit (else the revision's name)."""
    if benchmark.get("path"):  # missing, or a FIFO or /dev/zero: one line saying which
        return f"file:sha256:{file_digest(regular_file(Path(benchmark.path).expanduser(), WHAT))}"
    spec = CATALOG.find("loader", str(benchmark.get("loader")))
    if spec is not None and spec.key is not None:
        return str(spec.key(benchmark))
    asked = benchmark.get("revision")
    commit = resolved_revision(str(benchmark.hf_id), str(asked or "main"), "datasets")
    rev = f"@{commit}" if commit else f"@{asked}" if asked else ""
    return f"hub:{benchmark.hf_id}:{benchmark.hf_config}:{benchmark.split}{rev}"


def snapshot_identity(benchmark: dict[str, Any], source: str, retriever: dict[str, Any], corpus: dict[str, Any] | None,
                      reranker: dict[str, Any] | None = None) -> dict[str, Any]:
    """A retrieval snapshot's identity: the benchmark's keyed settings and source, the keyed retriever
    node, the corpus fingerprint and the reranker's settings."""
    return {
        "format": SNAPSHOT_FORMAT,
        "benchmark": keyed("benchmark", {k: v for k, v in sorted(key_view("benchmark", benchmark).items()) if k not in _BENCHMARK_NOT_IN_SNAPSHOT}),
        "source": source,
        "retriever": dict(sorted(by_content(key_view("retriever", retriever), plugin_schemas.schema_for("retriever", str(retriever.get("name")))).items())),
        "corpus": corpus,
        "reranker": reranker,
    }


# the families the RSC probe sends itself (NF generator, CoT chains, forced re-score); an engine-asking retriever adds its own
PROBE_FAMILIES = ("generator", "assessors", "rescore")


@dataclass(frozen=True)
class CellIdentity:
    """A cell's name and hash, what the hash covers, and its legacy keys and their evidence."""

    cell: Cell
    payload: dict[str, Any]
    fragments: Fragments
    legacy: tuple[Cell, ...] = ()
    evidence: dict[str, str | None] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.cell.key

    def folder(self, results_dir: str | Path) -> Path:
        return self.cell.folder(results_dir)

    def settings(self, cfg: Settings) -> dict[str, Any]:
        """summary.csv's row: keyed settings flattened, metric version, and the digests of prompt families,
        local inputs and plug-ins (``inputs.benchmark.path``)."""
        nested = nested_settings(cfg)
        nested["metric_version"] = self.fragments.metric_version
        # what the key holds of the settings left to this machine (device=auto ran on cuda)
        nested["backend"].update(self.fragments.resolved)
        f = self.fragments
        return {**flatten(nested), "prompts": digest(f.prompts), **flatten({"prompts": f.prompts, "inputs": f.inputs, "plugins": f.plugins})}


@dataclass(frozen=True)
class ProbeIdentity:
    """A probe's name and hash, as :class:`CellIdentity` is a cell's."""

    probe: ProbeKey
    payload: dict[str, Any]
    fragments: Fragments
    legacy: tuple[ProbeKey, ...] = ()
    evidence: dict[str, str | None] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.probe.key

    @property
    def n(self) -> int:
        return self.probe.n

    @property
    def model(self) -> str:
        return self.probe.model

    @property
    def benchmark(self) -> str:
        return self.probe.benchmark

    @property
    def config_hash(self) -> str:
        return self.probe.config_hash

    def folder(self, results_dir: str | Path) -> Path:
        return self.probe.folder(results_dir)

    def with_n(self, n: int) -> "ProbeIdentity":
        """The same probe on ``n`` calibration queries (keyed by the n that ran)."""
        return replace(self, probe=self.probe.with_n(n), legacy=tuple(k.with_n(n) for k in self.legacy))


# Fragments, from the plug-ins' specs


def _inputs(cfg: Settings, plain: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(local input read -> content digest, the model's input settings its engine does not read)."""
    spec = CATALOG.get("backend", str(plain["backend"]["name"]))
    marked = _input_fields(ModelConfig)
    model = plain["model"]
    reads = spec.model_inputs(cfg) if spec.model_inputs is not None else {k: v for k, v in marked.items() if model.get(k)}
    unread = tuple(f"model.{name}" for name in marked if name not in reads)
    groups = (("model", reads), ("backend", _input_fields(spec.schema)), ("benchmark", _input_fields(loader_schema(str(plain["benchmark"]["loader"])))),
              ("retriever", _input_fields(schema_for("retriever", str(plain["retriever"]["name"])))),
              ("strategy", _input_fields(schema_for("strategy", strategy_impl(plain["strategy"])))))
    inputs = {f"{group}.{name}": input_digest(plain[group][name], kind)
              for group, marks in groups for name, kind in marks.items() if plain[group].get(name)}
    return inputs, unread


def _plugins(plain: dict[str, Any]) -> dict[str, str]:
    """The sources of the cell's plug-ins that do not ship with madara (``plain``: the cell's config, ``to_plain``)."""
    chosen = (("backend", str(plain["backend"]["name"])), ("retriever", str(plain["retriever"]["name"])),
              ("strategy", strategy_impl(plain["strategy"])), ("loader", str(plain["benchmark"].get("loader"))))
    return {f"{kind}:{name}": src for kind, name in chosen if (src := CATALOG.source(kind, name)) is not None}


def _families(cfg: Settings, base: tuple[str, ...] | None) -> dict[str, str]:
    """The digests of the prompt families sent: ``base`` (None: the strategy's declared ones), plus the retriever's."""
    from madara_cli.config.folders import prompts_of

    prompts = prompts_of(cfg)
    if base is None:
        return prompt_digests(strategy_impl(cfg.strategy), str(cfg.retriever.name), prompts)
    spec = CATALOG.find("retriever", str(cfg.retriever.name))
    families = [*base, *(f for f in (spec.families() if spec is not None else ()) if f not in base)]
    return {f: prompt_digest(f, prompts) for f in families}


def _fragments(cfg: Settings, families: tuple[str, ...] | None = None, plain: dict[str, Any] | None = None) -> Fragments:
    plain = plain if plain is not None else to_plain(cfg)
    inputs, unread = _inputs(cfg, plain)
    engine = CATALOG.get("backend", str(cfg.backend.name))
    hub_commit = None
    if engine.loads_hub is not None and engine.loads_hub(cfg):
        hub_commit = resolved_revision(str(cfg.model.get("hf_id")), str(cfg.model.get("revision")))
    resolved = dict(engine.resolves(cfg)) if engine.resolves is not None else {}  # what settings left to this machine resolve to
    return Fragments(prompts=_families(cfg, families), metric_version=metrics.METRIC_VERSION, inputs=inputs, unread=unread,
                     hub_commit=hub_commit, plugins=_plugins(plain), resolved=resolved)


def _evidence(fragments: Fragments, probe_prompts_added: tuple[str, ...] = ()) -> dict[str, str | None]:
    """What a record finished under a path-keyed key must show to stand for this one: the GGUF's digest
    and the hub commit (both in its provenance); any other input, plug-in source or new prompt family it cannot (None)."""
    out: dict[str, str | None] = {
        dotted: value.split(":", 1)[1] if dotted == "model.gguf" and isinstance(value, str) and value.startswith("sha256:") else None
        for dotted, value in fragments.inputs.items()}
    if fragments.hub_commit:
        out["model.commit"] = fragments.hub_commit
    out.update({f"plugins.{name}": None for name in fragments.plugins})
    out.update({f"prompts.{family}": None for family in probe_prompts_added})
    return out


# Cells and probes


def identify(cfg: Settings) -> CellIdentity:
    """The identity of the cell ``cfg`` composes (see the module docstring)."""
    plain = to_plain(cfg)  # read by the fragments and both payloads below, never changed
    fragments = _fragments(cfg, plain=plain)
    payload = cell_identity(cfg, fragments, plain)
    model, retriever = plain["model"], plain["retriever"]
    cell = Cell(
        grid=str(plain["grid_name"]), model=str(model["name"]), benchmark=str(plain["benchmark"]["name"]),
        strategy=str(plain["strategy"]["name"]), retriever=str(retriever["name"]), k=int(retriever["k"]), seed=int(plain["seed"]),
        limit=plain["limit"], config_hash=digest(payload),
    )
    old_commit = resolved_revision(str(model.get("hf_id")), str(model.get("revision")))
    old = replace(cell, config_hash=digest(path_keyed_cell_identity(cfg, fragments.prompts, fragments.metric_version, old_commit, plain)))
    legacy = () if old == cell else (old,)
    return CellIdentity(cell=cell, payload=payload, fragments=fragments, legacy=legacy, evidence=_evidence(fragments))


def identify_probe(cfg: Settings, n: int | None = None) -> ProbeIdentity:
    """The identity of the RSC probe of ``cfg`` on ``n`` calibration queries (default ``benchmark.calibration``)."""
    fragments = _fragments(cfg, PROBE_FAMILIES)
    payload = probe_identity(cfg, fragments)
    n = int(n if n is not None else cfg.benchmark.calibration)
    probe = ProbeKey(model=str(cfg.model.name), benchmark=str(cfg.benchmark.name), n=n, config_hash=digest(payload))
    old_prompts = {f: d for f, d in fragments.prompts.items() if f in PROBE_FAMILIES}
    old = replace(probe, config_hash=digest(path_keyed_probe_identity(cfg, old_prompts, fragments.metric_version)))
    added = tuple(f for f in fragments.prompts if f not in PROBE_FAMILIES)
    return ProbeIdentity(probe=probe, payload=payload, fragments=fragments, legacy=() if old == probe else (old,),
                         evidence=_evidence(fragments, added))


# Prompt families by their rendered requests

_DIGESTS: dict[tuple[str, str], str] = {}


def prompt_digest(family: str, prompts: PromptSet | None = None) -> str:
    """The digest of the family's requests rendered with ``prompts`` (the shipped set by default)."""
    if prompts is None:
        from madara_cli.config.folders import shipped_prompt_set

        prompts = shipped_prompt_set()
    key = (family, prompts.sha)
    if key not in _DIGESTS:
        fam = CATALOG.family(family)
        if fam is None:
            raise ValueError(f"unknown prompt family '{family}'; valid: {', '.join(sorted(CATALOG.families()))}")
        _DIGESTS[key] = (family_digest(fam.sample(prompts)) if fam.sample is not None
                         else digest([[t, prompts.template(t).text] for t in sorted(fam.templates)], 16, ascii=False))
    return _DIGESTS[key]


def prompt_digests(strategy: str, retriever: str = "bm25s", prompts: PromptSet | None = None) -> dict[str, str]:
    """The digests of every family a cell of ``strategy`` (with ``retriever``) sends, in the words of ``prompts``."""
    families = ["generator"]
    for spec in (CATALOG.find("strategy", strategy), CATALOG.find("retriever", retriever)):
        families += [f for f in (spec.families() if spec is not None else ()) if f not in families]
    return {f: prompt_digest(f, prompts) for f in families}
