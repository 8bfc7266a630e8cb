"""The backend contract: a batch of requests in, a list of completions out, same order.

The shape follows vLLM's offline API (``LLM.chat(conversations, sampling_params)``
takes a whole batch with per-request sampling parameters) so that every engine fits
without change: llama.cpp runs the batch sequentially, vLLM in one call, an
OpenAI-compatible server with bounded concurrency.

Each backend module declares one :class:`BackendSpec` and registers it with
:func:`register_backend`: its settings schema, how to build the engine from a
composed config, its cache fingerprint (computed without loading a model, for
``madara plan``), its runtime-only settings (left out of cell keys), what its cells'
and probes' keys add beyond its settings (``key_fragment``: a local input's content
digest, a resolved device) and the package whose version provenance records. The shipped modules of this package are found by
:func:`madara_cli.backends.load_builtin`; an installed package registers its own
through the ``madara.backends`` entry point group (see
:mod:`madara_cli.composition.plugins`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence, runtime_checkable

from madara_cli.config.plugin_schemas import register_schema
from madara_cli.records import ChatRequest, Completion, ScoreRequest
from madara_cli.registry import Registry

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Called by a backend whose ``reports_each`` is true with (index in the batch, completion)
# the moment each request finishes, so the cache stores it and progress moves before the
# rest of the batch is done.
OnDone = Callable[[int, Completion], None]


@runtime_checkable
class Backend(Protocol):
    name: str

    @property
    def fingerprint(self) -> str:
        """Identity of the model weights (file hash, or HF id + revision). Part of every
        cache key, so two different models never share cached completions."""
        ...

    @property
    def batch_size(self) -> int:
        """How many requests the response cache hands over at once. Each finished chunk
        is stored before the next is sent, so a killed run loses at most one chunk. A
        backend with ``reports_each = True`` takes an ``on_done`` callback
        (:data:`OnDone`) in ``chat`` and ``next_token_logprobs`` and calls it as each
        request finishes: then every finished completion is stored at once."""
        ...

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Generate one completion per request, in order. Prompts that do not fit the
        context are truncated from the left of the user turn and flagged
        ``truncated=True``; they never raise."""
        ...

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        """For each request, render the chat, append ``prefix`` as the start of the
        assistant turn, and return the log-probability of the first token of each
        candidate string as ``Completion.logprobs``."""
        ...

    def close(self) -> None:
        """Release the engine."""
        ...


@dataclass(frozen=True)
class BackendSpec:
    """Everything madara needs to know about one backend, in one record."""

    name: str  # the ``backend.name`` its yaml sets
    schema: type  # dataclass of its settings, extending config.schema.BackendConfig
    build: Callable[["DictConfig"], Backend]  # the engine for a composed config (may load a model)
    fingerprint: Callable[["DictConfig"], str]  # the engine's cache identity, without loading a model
    runtime_only: tuple[str, ...] = ()  # settings that change speed or placement only: out of every key
    package: Optional[str] = None  # the distribution whose version provenance records (None: none)
    # Makes ready what ``build`` will load (a download, a conversion) and says what is
    # where; ``madara prepare`` runs it. None: nothing to make ready.
    prepare: Optional[Callable[["DictConfig", Callable[[str], None]], str]] = None
    model_settings: tuple[str, ...] = ()  # model.* settings only this backend reads: in its cells' keys alone
    worker_threads: Optional[str] = None  # the setting that takes a parallel worker's share of the cores (launchers set it)
    # What this machine lacks to run it, as one line (None: nothing), checked without
    # loading anything: `madara reproduce` stops on it before the first cell.
    missing: Optional[Callable[[], Optional[str]]] = None
    # What the keys of its cells and probes add beyond its settings, computed without
    # loading a model: what its local inputs are (a digest of their bytes, where a setting
    # holds only their path) and what its settings resolve to on this machine (``auto``
    # devices). None, or an empty dict: nothing, and no key moves.
    key_fragment: Optional[Callable[["DictConfig"], dict[str, str]]] = None


BACKENDS: Registry[BackendSpec] = Registry("backend")


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Register ``spec`` (and its schema, for composition). The same module registering
    again is a no-op; another one under a taken name is an error."""
    old = BACKENDS.find(spec.name)
    if old is not None:
        if getattr(old.build, "__module__", None) == getattr(spec.build, "__module__", None):
            return old
        raise ValueError(f"backend '{spec.name}' is already registered (by {old.build.__module__})")
    register_schema("backend", spec.name, spec.schema, spec.runtime_only, spec.model_settings)
    BACKENDS.register(spec.name)(spec)
    return spec


def installed_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
