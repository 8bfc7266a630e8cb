"""The identity of a cell and of a probe, derived once from a composed config.

The rules of a key live in :mod:`madara_cli.config.identity` (the bottom layer); what
only the plug-ins can say is gathered here, one floor above them, from their specs:

* the digest of every prompt family the cell sends (its strategy's and its retriever's
  declared families, in the words of its prompt set);
* every local input it reads, by content: a setting whose schema field is an
  ``input_field`` (``benchmark.path``, ``benchmark.corpus``, ``retriever.index``, a
  pinned ``strategy.probe``, transformers' ``backend.adapter``), and of the model only what its engine reads
  (``BackendSpec.model_inputs``: llama.cpp the GGUF, vLLM the GGUF or folder it loads,
  a served model nothing);
* the hub commit, only where the engine loads the hub (``BackendSpec.loads_hub``);
* what the engine's settings left to this machine resolve to (``BackendSpec.resolves``:
  transformers' ``device=auto`` is ``cuda`` on a GPU machine), in the setting's place;
* the source of a plug-in that does not ship with madara (an ``--include`` file's
  digest, an installed package's name and version).

:func:`identify` returns a :class:`CellIdentity`, made once per cell and handed down
(the runner, plan and the tables' rows read it, none recomputes it); it also names the
keys the same cell had under rules that have since moved (``legacy``) and what an old
record must show to stand for it (``evidence``), which :func:`standing` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from madara_cli.config.identity import (
    Cell,
    Fragments,
    ProbeKey,
    cell_identity,
    digest,
    flatten,
    input_digest,
    nested_settings,
    path_keyed_cell_identity,
    path_keyed_probe_identity,
    probe_identity,
    standing,  # noqa: F401  (the rule the finders apply; re-exported beside the identities)
    strategy_impl,
    to_plain,
)
from madara_cli.config.plugin_schemas import schema_for
from madara_cli.config.schema import BenchmarkConfig, ModelConfig

# The prompt families the RSC probe sends itself (its NF generator, the assessors' CoT
# chains, the forced re-score); a retriever that asks the engine adds its own.
PROBE_FAMILIES = ("generator", "assessors", "rescore")


@dataclass(frozen=True)
class CellIdentity:
    """A cell's name and hash, what the hash covers, and how results finished under keys
    that have since moved are recognised (see the module docstring)."""

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

    def settings(self, cfg: DictConfig) -> dict[str, Any]:
        """summary.csv's row: the keyed settings flattened (``strategy.top_k``), the
        metric version, a digest of the prompt families and one per family, and the
        content digest of every local input (``inputs.benchmark.path``)."""
        nested = nested_settings(cfg)
        nested["metric_version"] = self.fragments.metric_version
        # what the key holds of the settings left to this machine (device=auto ran on cuda)
        nested["backend"].update(self.fragments.resolved)
        out = flatten(nested)
        out["prompts"] = digest(self.fragments.prompts)
        out.update({f"prompts.{family}": d for family, d in self.fragments.prompts.items()})
        out.update({f"inputs.{k}": v for k, v in self.fragments.inputs.items()})
        out.update({f"plugins.{k}": v for k, v in self.fragments.plugins.items()})
        return out


@dataclass(frozen=True)
class ProbeIdentity:
    """A probe's name and hash, as :class:`CellIdentity` is a cell's."""

    probe: ProbeKey
    payload: dict[str, Any]
    fragments: Fragments
    legacy: tuple[ProbeKey, ...] = ()
    evidence: dict[str, str | None] = field(default_factory=dict)
    # The probe's arms beside NF and RSC, composed with its identity so the probe composes
    # nothing mid-run: the isolation arm's strategy node (PDE-Random as shipped), when the
    # isolation probe is on.
    arms: dict[str, DictConfig] = field(default_factory=dict)

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
        from dataclasses import replace

        return replace(self, probe=self.probe.with_n(n), legacy=tuple(k.with_n(n) for k in self.legacy))


# --------------------------------------------------------------------------- #
# Fragments, from the plug-ins' specs
# --------------------------------------------------------------------------- #


def _input_fields(schema: type | None) -> dict[str, str]:
    return {f.name: f.metadata["input"] for f in fields(schema) if f.metadata.get("input")} if schema else {}


def _inputs(cfg: DictConfig, plain: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(every local input the cell reads -> its content digest, the model's input
    settings its engine does not read). ``plain``: ``to_plain(cfg)``, read instead of
    ``cfg`` where it can be."""
    from madara_cli.backends import backend_spec

    spec = backend_spec(str(plain["backend"]["name"]))
    marked = _input_fields(ModelConfig)
    model = plain["model"]
    reads = spec.model_inputs(cfg) if spec.model_inputs is not None else {k: v for k, v in marked.items() if model.get(k)}
    inputs: dict[str, Any] = {}
    for name, kind in reads.items():
        if model.get(name):
            inputs[f"model.{name}"] = input_digest(model.get(name), kind)
    unread = tuple(f"model.{name}" for name in marked if name not in reads)
    for group, schema in (
        ("backend", spec.schema),
        ("benchmark", BenchmarkConfig),
        ("retriever", schema_for("retriever", str(plain["retriever"]["name"]))),
        ("strategy", schema_for("strategy", strategy_impl(plain["strategy"]))),
    ):
        for name, kind in _input_fields(schema).items():
            value = plain[group].get(name)
            if value:
                inputs[f"{group}.{name}"] = input_digest(value, kind)
    return inputs, unread


def _hub_commit(cfg: DictConfig) -> str | None:
    from madara_cli.backends import backend_spec
    from madara_cli.backends.weights import resolved_revision

    spec = backend_spec(str(cfg.backend.name))
    if spec.loads_hub is None or not spec.loads_hub(cfg):
        return None
    return resolved_revision(str(cfg.model.get("hf_id")), str(cfg.model.get("revision")))


def _resolved(cfg: DictConfig) -> dict[str, str]:
    """What the engine's settings left to this machine resolve to (``BackendSpec.resolves``)."""
    from madara_cli.backends import backend_spec

    spec = backend_spec(str(cfg.backend.name))
    return dict(spec.resolves(cfg)) if spec.resolves is not None else {}


def _plugins(plain: dict[str, Any]) -> dict[str, str]:
    """The sources of the cell's plug-ins that do not ship with madara (``plain``: the cell's config, ``to_plain``)."""
    from madara_cli.composition.plugins import plugin_source

    chosen = (("backend", str(plain["backend"]["name"])), ("retriever", str(plain["retriever"]["name"])),
              ("strategy", strategy_impl(plain["strategy"])), ("loader", str(plain["benchmark"].get("loader"))))
    return {f"{kind}:{name}": src for kind, name in chosen if (src := plugin_source(kind, name)) is not None}


def _families(cfg: DictConfig, base: tuple[str, ...] | None) -> dict[str, str]:
    """The digests of the prompt families sent: ``base`` (None: the strategy's declared
    ones), plus the retriever's."""
    from madara_cli.agents.digest import prompt_digest, prompt_digests
    from madara_cli.config.folders import prompts_of
    from madara_cli.retrievers.spec import retriever_spec

    prompts = prompts_of(cfg)
    if base is None:
        return prompt_digests(strategy_impl(cfg.strategy), str(cfg.retriever.name), prompts)
    spec = retriever_spec(str(cfg.retriever.name))
    families = [*base, *(f for f in (spec.families() if spec is not None else ()) if f not in base)]
    return {f: prompt_digest(f, prompts) for f in families}


def _fragments(cfg: DictConfig, families: tuple[str, ...] | None = None, plain: dict[str, Any] | None = None) -> Fragments:
    from madara_cli.metrics import METRIC_VERSION

    plain = plain if plain is not None else to_plain(cfg)
    inputs, unread = _inputs(cfg, plain)
    return Fragments(prompts=_families(cfg, families), metric_version=METRIC_VERSION, inputs=inputs, unread=unread,
                     hub_commit=_hub_commit(cfg), plugins=_plugins(plain), resolved=_resolved(cfg))


def _evidence(fragments: Fragments, probe_prompts_added: tuple[str, ...] = ()) -> dict[str, str | None]:
    """What a record finished under a path-keyed key must show to stand for this one:
    the GGUF's digest and the hub commit (both in its provenance); any other input, a
    plug-in source or a prompt family the old key did not cover, it cannot show (None)."""
    out: dict[str, str | None] = {}
    for dotted, value in fragments.inputs.items():
        if dotted == "model.gguf" and isinstance(value, str) and value.startswith("sha256:"):
            out[dotted] = value.split(":", 1)[1]
        else:
            out[dotted] = None
    if fragments.hub_commit:
        out["model.commit"] = fragments.hub_commit
    for name in fragments.plugins:
        out[f"plugins.{name}"] = None
    for family in probe_prompts_added:
        out[f"prompts.{family}"] = None
    return out


# --------------------------------------------------------------------------- #
# Cells and probes
# --------------------------------------------------------------------------- #


def identify(cfg: DictConfig) -> CellIdentity:
    """The identity of the cell ``cfg`` composes (see the module docstring)."""
    from madara_cli.backends.weights import resolved_revision

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
    old = cell.with_hash(digest(path_keyed_cell_identity(cfg, fragments.prompts, fragments.metric_version, old_commit, plain)))
    legacy = () if old == cell else (old,)
    return CellIdentity(cell=cell, payload=payload, fragments=fragments, legacy=legacy, evidence=_evidence(fragments))


def identify_probe(cfg: DictConfig, n: int | None = None) -> ProbeIdentity:
    """The identity of the RSC probe of ``cfg`` on ``n`` calibration queries (default
    ``benchmark.calibration``)."""
    fragments = _fragments(cfg, PROBE_FAMILIES)
    payload = probe_identity(cfg, fragments)
    n = int(n if n is not None else cfg.benchmark.calibration)
    probe = ProbeKey(model=str(cfg.model.name), benchmark=str(cfg.benchmark.name), n=n, config_hash=digest(payload))
    old_prompts = {f: d for f, d in fragments.prompts.items() if f in PROBE_FAMILIES}
    old = probe.with_hash(digest(path_keyed_probe_identity(cfg, old_prompts, fragments.metric_version)))
    added = tuple(f for f in fragments.prompts if f not in PROBE_FAMILIES)
    return ProbeIdentity(probe=probe, payload=payload, fragments=fragments, legacy=() if old == probe else (old,),
                         evidence=_evidence(fragments, added), arms=_arms(cfg))


# The isolation probe's arm (madara's extension): PDE-Random, k random documents answered
# alone and voted uniformly, as shipped.
ISOLATION_STRATEGY = "pde_random"


def _arms(cfg: DictConfig) -> dict[str, DictConfig]:
    from madara_cli.composition.compose import strategy_node
    from madara_cli.config.identity import isolation_on

    return {"isolation": strategy_node(ISOLATION_STRATEGY)} if isolation_on(cfg) else {}
