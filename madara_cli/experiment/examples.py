"""What a cell runs on: load -> limit -> retrieve, written once for ``madara run``,
``madara plan`` and the RSC probe.

The benchmark is loaded once and split by :func:`madara_cli.data.splits.load_splits` (the
seeded order; ``benchmark.calibration_split`` nested | disjoint); the evaluated queries are
cut to ``limit`` (or the calibration split taken whole) and get their top-k documents from the
frozen snapshot. A generative reranker (``retriever=rerank``) ranks with ``retriever.model``'s
engine when set, else the cell's own (:func:`reranker_engine`); that model's config is the one a
cell composes besides its own, once, at the cell's start (:func:`reranker_config`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from madara_cli.config.identity import ProbeIdentity, identify_probe
from madara_cli.config.settings import Node, Settings
from madara_cli.core.records import Example
from madara_cli.data.splits import LoadReport, load_splits
from madara_cli.plugins.catalog import CATALOG
from madara_cli.retrievers.retrieval import retrieve

if TYPE_CHECKING:
    from madara_cli.backends.cache import CachedLLM
    from madara_cli.experiment.engines import EnginePool

SPLITS = ("eval", "calibration")


@dataclass
class CellExamples:
    """One load of a cell's benchmark: ``examples``, the queries asked for (evaluated cut to
    ``limit``, or the calibration split); ``calibration``, that split as loaded, not retrieved
    (a ``madara`` cell probes on it); ``load``, what the loader kept and dropped; ``sizes``,
    (evaluated, calibration) queries held when these stand for more (``madara plan``'s
    placeholders for data not here), None: as many as there are."""

    examples: list[Example]
    calibration: list[Example]
    load: LoadReport
    sizes: tuple[int, int] | None = None

    @property
    def n_examples(self) -> int:
        return len(self.examples) if self.sizes is None else self.sizes[0]

    @property
    def n_calibration(self) -> int:
        return len(self.calibration) if self.sizes is None else self.sizes[1]


def reranker_config(cfg: Settings) -> Node | None:
    """The config of ``retriever.model`` (the paper: Qwen3-0.6B) for a generative reranker, on the
    cell's backend and seed; None when the cell's own engine ranks, or nothing does."""
    spec = CATALOG.find("retriever", str(cfg.retriever.name))
    if spec is None or not spec.uses_engine or not spec.engine_model or not cfg.retriever.get(spec.engine_model):
        return None
    from madara_cli.composition import compose

    return compose([f"model={cfg.retriever[spec.engine_model]}", f"backend={cfg.backend.name}", f"seed={cfg.seed}"])


def reranker_engine(cfg: Settings, pool: EnginePool, reranker: Node | None = None) -> CachedLLM | None:
    """A generative reranker's engine: ``retriever.model``'s, else the cell's own (``reranker``:
    :func:`reranker_config` of ``cfg`` if already composed)."""
    spec = CATALOG.find("retriever", str(cfg.retriever.name))
    if spec is None or not spec.uses_engine:
        return None
    if spec.engine_model and cfg.retriever.get(spec.engine_model):
        return pool.get(reranker if reranker is not None else reranker_config(cfg))
    return pool.get(cfg)


def engines_answer(pool: object | None) -> bool:
    """Whether ``pool``'s engines answer: ``madara plan``'s recorders reply with placeholders, and a
    ranking made from those must never be frozen in a retrieval snapshot."""
    return pool is not None and bool(getattr(pool, "answers", True))


def retrieve_for(cfg: Settings, examples: list[Example], pool: EnginePool | None, reranker: Node | None = None) -> list[Example]:
    """``examples`` with the cell's top-k documents; without engines that answer (``madara bench``,
    a plan's recorders) a reranking retriever's first stage stands in for it."""
    spec = CATALOG.find("retriever", str(cfg.retriever.name))
    if not engines_answer(pool):
        pool = None
    if pool is None and spec is not None and spec.uses_engine and spec.stand_in:
        return retrieve(examples, cfg.merged({"retriever": {"name": cfg.retriever[spec.stand_in]}}))
    return retrieve(examples, cfg, llm=reranker_engine(cfg, pool, reranker) if pool is not None else None)


# How a walk loads a benchmark: load_cell's signature (cfg, split, n); ``madara plan`` loads each once a grid.
Load = Callable[..., "CellExamples"]


@dataclass
class PreparedProbe:
    """A probe walked up to its engine: its identity (keyed by the n that runs), its calibration queries retrieved (None: finished)."""

    ident: ProbeIdentity
    examples: list[Example] | None


def prepare_probe(cfg: Settings, engines: EnginePool | None, n: int | None = None, force: bool = False,
                  load: Load | None = None, reranker: Node | None = None) -> PreparedProbe:
    """The probe of ``cfg`` on ``n`` calibration queries (default ``benchmark.calibration``): its identity
    and, unless finished (and not ``force``), its calibration split loaded (``load``, default
    :func:`load_cell`; a plan loads each benchmark once, a madara cell hands over its split) and
    retrieved (``reranker``: :func:`reranker_config` of ``cfg``)."""
    from madara_cli.diagnose.probe import finished_probe

    ident = identify_probe(cfg, n)
    if not force and finished_probe(cfg, ident) is not None:
        return PreparedProbe(ident, None)
    loaded = (load or load_cell)(cfg, "calibration", n)
    examples = retrieve_for(cfg, loaded.examples, engines, reranker)
    held = loaded.n_examples
    if held < ident.n:  # keyed by the n that ran, as a cell's limit is
        from madara_cli.data.splits import warn

        warn(f"a probe of {ident.n} calibration queries asked for, but benchmark {cfg.benchmark.name} holds {held}: "
             f"it runs on {held} and is keyed n{held}")
        ident = ident.with_n(held)
    return PreparedProbe(ident, examples)


def sized_to_data(cfg: Settings, loaded: CellExamples) -> tuple[Settings, dict]:
    """``cfg`` with ``limit`` and ``benchmark.calibration`` cut to what ``loaded`` holds, each cut warned
    in one line, and what was asked for (``limit_requested``, ``calibration_requested``; empty, and
    ``cfg`` as it is, when both fit). The key is computed from this config, so it says what ran
    (``limit=100000`` on 3 queries is keyed ``n3``); a limit within the data leaves it as it was."""
    from madara_cli.data.splits import warn

    changes: dict = {}
    name = str(cfg.benchmark.name)
    if cfg.limit is not None and loaded.n_examples < int(cfg.limit):
        n = loaded.n_examples
        changes["limit"] = n
        warn(f"limit={cfg.limit} is more than the {n} queries benchmark {name} holds: the cell runs on {n} and is keyed n{n}")
    wanted = int(cfg.benchmark.calibration)
    if loaded.n_calibration < wanted:
        n = loaded.n_calibration
        changes["benchmark"] = {"calibration": n}
        what = "" if n else f" (calibration_split={cfg.benchmark.get('calibration_split', 'nested')} leaves none beside the evaluated queries)"
        warn(f"benchmark.calibration={wanted} is more than benchmark {name} holds: clipped to {n}{what}; recorded in the cell's evaluated_set")
    if not changes:
        return cfg, {}
    requested = {"limit_requested": int(cfg.limit)} if "limit" in changes else {}
    if "benchmark" in changes:
        requested["calibration_requested"] = wanted
    return cfg.merged(changes), requested


def load_cell(cfg: Settings, split: str = "eval", n: int | None = None) -> CellExamples:
    """Load and limit: the cell's examples (``split``: eval or calibration), not yet retrieved."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    bench = cfg.benchmark if n is None else cfg.benchmark.merged({"calibration": int(n)})
    loaded = load_splits(bench, seed=int(cfg.seed))
    if split == "eval":
        chosen = loaded.evaluated[: int(cfg.limit)] if cfg.limit is not None else loaded.evaluated
    else:
        chosen = loaded.calibration
    return CellExamples(chosen, loaded.calibration, loaded.report)
