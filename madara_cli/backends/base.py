"""The backend contract: a batch of requests in, a list of completions out, same order.

The shape is vLLM's offline API (``LLM.chat(conversations, sampling_params)``: a batch
with per-request sampling), so every engine fits: llama.cpp runs the batch sequentially,
vLLM in one call, an OpenAI-compatible server with bounded concurrency.

Each backend module registers one :class:`BackendSpec` (:func:`madara_cli.plugins.register`):
settings schema, how to build the engine, its cache fingerprint (without loading a model,
for ``madara plan``), runtime-only settings (left out of cell keys) and the package whose
version provenance records. :func:`madara_cli.composition.plugins.load_plugins` imports
every module here; an installed package registers through the ``madara.backends`` entry
point group, a folder of your own through ``--include``.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional, Protocol, Sequence, runtime_checkable

from madara_cli.config.settings import Settings
from madara_cli.config.validate import MAX_CONTEXT
from madara_cli.core.held import held
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.plugins.shape import Spec, int_range

# Called by a ``reports_each`` backend with (index in the batch, completion) as each request
# finishes, so the cache stores it and progress moves before the batch is done.
OnDone = Callable[[int, Completion], None]


@runtime_checkable
class Backend(Protocol):
    name: str

    @property
    def fingerprint(self) -> str:
        """Identity of the weights (file hash, or HF id + revision): in every cache key."""
        ...

    @property
    def batch_size(self) -> int:
        """Requests the response cache hands over at once (each chunk stored before the next
        is sent). A ``reports_each = True`` backend takes an ``on_done`` callback
        (:data:`OnDone`) in ``chat`` and ``next_token_logprobs``, called per request."""
        ...

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """One completion per request, in order; a prompt too long for the context is cut
        from the left of the user turn and flagged ``truncated=True``, never raised."""
        ...

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        """Per request: the chat rendered with ``prefix`` opening the assistant turn, and each
        candidate's first-token log-probability as ``Completion.logprobs``."""
        ...

    def close(self) -> None:
        """Release the engine."""
        ...


@dataclass(frozen=True, kw_only=True)
class BackendSpec(Spec):
    """Everything madara needs to know about one backend (beside
    :class:`~madara_cli.plugins.shape.Spec`'s fields: ``name`` is the yaml's ``backend.name``,
    ``schema`` extends config.schema.BackendConfig, ``package`` is what provenance versions)."""

    kind: ClassVar[str] = "backend"

    build: Callable[[Settings], Backend]  # the engine for a composed config (may load a model)
    fingerprint: Callable[[Settings], str]  # the engine's cache identity, without loading a model
    # Makes ready what ``build`` will load (a download, a conversion) and says where (``madara prepare``).
    prepare: Optional[Callable[[Settings, Callable[[str], None]], str]] = None
    model_settings: tuple[str, ...] = ()  # model.* settings only this backend reads: in its cells' keys alone
    worker_threads: Optional[str] = None  # the setting that takes a parallel worker's share of the cores (launchers set it)
    # What this machine lacks to run it, one line (None: nothing), without loading anything:
    # `madara reproduce` stops on it before the first cell.
    missing: Optional[Callable[[], Optional[str]]] = None
    # The model settings naming local files this engine reads, with their input kind
    # ({"gguf": "file"}): each enters keys by content; an input it does not read enters
    # none. None: every set model setting the schema marks an input (config.schema.input_field).
    model_inputs: Optional[Callable[[Settings], dict[str, str]]] = None
    # Whether it loads model.hf_id at model.revision from the hub: then the commit the local
    # hub cache knows for it keys its cells (an update is a new cell); no other engine's key
    # depends on the hub cache.
    loads_hub: Optional[Callable[[Settings], bool]] = None
    # What settings left to this machine resolve to, without loading a model ({"device":
    # "cuda", "dtype": "bfloat16"} for auto/null on a GPU): keys hold the resolved value, so
    # a GPU's cell and a laptop's are not one. None: every setting is what it says.
    resolves: Optional[Callable[[Settings], dict[str, str]]] = None


# Shared ranges: at most MAX_CONTEXT tokens of context (room for a prompt beside the reply
# budget: config.validate.check_budgets), at most 512 threads (llama.cpp's
# GGML_MAX_N_THREADS; backend.n_threads=100000 was once taken).
CONTEXT = int_range(1, MAX_CONTEXT, optional=True)
THREADS = int_range(1, 512, optional=True)


def importable(module: str) -> bool:
    """Whether ``module`` is imported already (and not blocked: None), or could be."""
    if module in sys.modules:  # perhaps without a __spec__
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@held
def installed_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
