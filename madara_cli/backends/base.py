"""The backend contract: a batch of requests in, a list of completions out, same order.

The shape follows vLLM's offline API (``LLM.chat(conversations, sampling_params)``
takes a whole batch with per-request sampling parameters) so that every engine fits
without change: llama.cpp runs the batch sequentially, vLLM in one call, an
OpenAI-compatible server with bounded concurrency.

Each backend module declares one :class:`BackendSpec` and registers it with
:func:`madara_cli.plugins.register`: its settings schema, how to build the engine from a
composed config, its cache fingerprint (computed without loading a model, for
``madara plan``), its runtime-only settings (left out of cell keys) and the package
whose version provenance records. The one loader
(:func:`madara_cli.composition.plugins.load_plugins`) imports every module of this
package; an installed package registers its own through the ``madara.backends`` entry
point group, a folder of your own through ``--include``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Optional, Protocol, Sequence, runtime_checkable

from madara_cli.config.validate import MAX_CONTEXT
from madara_cli.core.held import held
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.plugins.shape import Spec, int_range

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


@dataclass(frozen=True, kw_only=True)
class BackendSpec(Spec):
    """Everything madara needs to know about one backend, in one record (what every
    plug-in declares is :class:`~madara_cli.plugins.shape.Spec`'s: ``name`` is the
    ``backend.name`` its yaml sets, ``schema`` extends config.schema.BackendConfig,
    ``package`` is the distribution whose version provenance records)."""

    kind: ClassVar[str] = "backend"

    build: Callable[["DictConfig"], Backend]  # the engine for a composed config (may load a model)
    fingerprint: Callable[["DictConfig"], str]  # the engine's cache identity, without loading a model
    # Makes ready what ``build`` will load (a download, a conversion) and says what is
    # where; ``madara prepare`` runs it. None: nothing to make ready.
    prepare: Optional[Callable[["DictConfig", Callable[[str], None]], str]] = None
    model_settings: tuple[str, ...] = ()  # model.* settings only this backend reads: in its cells' keys alone
    worker_threads: Optional[str] = None  # the setting that takes a parallel worker's share of the cores (launchers set it)
    # What this machine lacks to run it, as one line (None: nothing), checked without
    # loading anything: `madara reproduce` stops on it before the first cell.
    missing: Optional[Callable[[], Optional[str]]] = None
    # The model settings that name local files this engine reads for a composed config,
    # with their input kind ({"gguf": "file"}): each enters keys by its content, and a
    # model input it does not read enters no key. None: every model setting whose schema
    # marks it an input (config.schema.input_field) and that is set.
    model_inputs: Optional[Callable[["DictConfig"], dict[str, str]]] = None
    # Whether it loads model.hf_id at model.revision from the Hugging Face hub for a
    # composed config: then the commit the local hub cache knows for that revision keys
    # its cells (a weights or template update is a new cell); no other engine's key
    # depends on what the hub cache holds.
    loads_hub: Optional[Callable[["DictConfig"], bool]] = None
    # What settings left to this machine resolve to for a composed config, computed
    # without loading a model ({"device": "cuda", "dtype": "bfloat16"} for device=auto,
    # dtype=null on a GPU): keys hold the resolved value in the setting's place, so a cell
    # run on a GPU and on a laptop are not one cell. None: every setting is what it says.
    resolves: Optional[Callable[["DictConfig"], dict[str, str]]] = None


# Ranges engines share: a context of at most MAX_CONTEXT tokens (whether a reply budget
# leaves room for a prompt in it is checked beside, config.validate.check_budgets), and
# at most 512 threads (llama.cpp's GGML_MAX_N_THREADS; backend.n_threads=100000 was taken).
CONTEXT = int_range(1, MAX_CONTEXT, optional=True)
THREADS = int_range(1, 512, optional=True)


@held
def installed_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
