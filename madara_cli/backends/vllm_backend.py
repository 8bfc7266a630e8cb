"""vLLM backend (extra: vllm): the paper's setting, offline ``vllm.LLM`` on GPU.

The engine is configured from the model config: ``hf_id`` at ``revision``, bf16,
``max_model_len`` 4096, tensor parallelism, prefix caching on (the agents' system
prompts are shared prefixes), the run's seed.

* **chat**: ONE ``LLM.chat(conversations, sampling_params=[...])`` call per chunk, each
  request with its own ``SamplingParams`` (temperature, top_p, max_tokens, seed, stop),
  so a whole stage is scheduled by vLLM at once.
* **scoring**: the prompt is the chat template rendered with the engine's tokenizer
  (``add_generation_prompt=True``) followed by the assistant ``prefix``, tokenised as
  ``LLM.chat`` does (``add_special_tokens=False``: the template carries BOS), and sent
  as token ids through ONE ``LLM.generate`` call with ``max_tokens=1``, greedy,
  ``allowed_token_ids`` = the candidates' first tokens and ``logprobs=20``. A
  candidate's value is the log-probability vLLM reports for its first token, ``-inf``
  when absent. What vLLM reports depends on its engine: V1 (``logprobs_mode``
  ``raw_logprobs``, the default) gives full-vocabulary log-probabilities of the top 20
  plus the sampled token (always the best candidate, thanks to ``allowed_token_ids``),
  so a candidate outside the top 20 is ``-inf``; the V0 engine gives log-probabilities
  renormalised over the allowed candidates. Scorers renormalise over the candidates
  either way, so both give the same scores whenever every candidate is reported.
* **truncation**: :func:`fit_messages` with token counts from the engine's tokenizer;
  a truncated prompt is flagged, never an error.
* **chat settings** (``backends/chat.py``): the model's ``chat_template_kwargs`` go to
  ``LLM.chat(..., chat_template_kwargs=...)`` and to every client-side
  ``apply_chat_template``; with ``system_role: false`` the conversation is folded first.
* **untrusted text**: ``LLM.chat`` renders the template to a string and encodes it with
  the tokenizer's added tokens parsed, so a document holding ``<|im_start|>`` would
  reach the model as that control token. A request whose content (or assistant
  prefix) holds one of the tokenizer's special-token strings is therefore rendered
  here and sent as token ids through ``LLM.generate``, its content encoded with
  ``split_special_tokens=True`` (:func:`safe_token_ids`); every other request takes
  ``LLM.chat`` unchanged.

The wall time of one batched call is shared equally between its completions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from madara_cli.backends.base import Backend, BackendSpec, installed_version, register_backend
from madara_cli.backends.chat import ChatSettings, ControlText, hf_control_strings, hf_encode_text, safe_token_ids
from madara_cli.backends.truncate import fit_messages
from madara_cli.config.schema import BackendConfig
from madara_cli.errors import BackendError
from madara_cli.records import ChatRequest, Completion, Message, ScoreRequest

# vLLM refuses more than ``max_logprobs`` (default 20) per position.
TOP_LOGPROBS = 20
# Room left for the template's own tokens that the count may miss (none, in practice).
MARGIN = 8


def _import_vllm() -> Any:
    try:
        import vllm
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] == "vllm":
            raise BackendError("vLLM is not installed: pip install -e '.[vllm]' (needs a CUDA GPU)") from None
        raise BackendError(f"vLLM cannot be imported: {e}") from None
    except ImportError as e:  # a broken install (CUDA libraries, torch mismatch)
        raise BackendError(f"vLLM cannot be imported: {' '.join(str(e).split())}") from None
    return vllm


def _dicts(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]



def engine_fingerprint(hf_id: str, revision: str, dtype: str, max_model_len: int, version: str, chat: ChatSettings = ChatSettings()) -> str:
    """The cache's model identity (also computed by ``madara plan`` without vLLM); chat
    settings other than the defaults render other prompts, so they are part of it."""
    return f"hf:{hf_id}@{revision}:{dtype}:len{max_model_len}:vllm-{version}{chat.fingerprint()}"

class VLLMBackend:
    name = "vllm"

    def __init__(
        self,
        hf_id: str,
        revision: str = "main",
        dtype: str = "bfloat16",
        max_model_len: int = 4096,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        batch_size: int = 4096,
        use_tqdm: bool = False,
        chat: ChatSettings | None = None,
    ):
        self._vllm = _import_vllm()
        self.chat_settings = chat or ChatSettings()
        self.hf_id, self.revision, self.dtype = hf_id, revision, dtype
        self.max_model_len = max_model_len
        self.use_tqdm = use_tqdm
        self._batch_size = batch_size
        try:
            self.llm = self._vllm.LLM(
                model=hf_id,
                revision=revision,
                tokenizer_revision=revision,
                dtype=dtype,
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                enable_prefix_caching=enable_prefix_caching,
                seed=seed,
            )
        except Exception as e:  # noqa: BLE001 - no GPU, OOM, gated or unknown model: the user's to fix
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise BackendError(f"vLLM could not load {hf_id}@{revision}: {first}") from e
        self.tokenizer = self.llm.get_tokenizer()
        self._control = ControlText(hf_control_strings(self.tokenizer))

    @property
    def fingerprint(self) -> str:
        """Weights, numerics and engine: a different dtype, context length or vLLM release
        can change outputs, so none of them may share cached completions."""
        return engine_fingerprint(
            self.hf_id, self.revision, self.dtype, self.max_model_len, getattr(self._vllm, "__version__", "unknown"), self.chat_settings
        )

    @property
    def batch_size(self) -> int:
        return self._batch_size

    # -- prompts ---------------------------------------------------------------

    def _render(self, messages: Sequence[Message]) -> str:
        conversation = _dicts(self.chat_settings.conversation(messages))
        kwargs = self.chat_settings.template_kwargs
        return self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True, **kwargs)

    def _encode(self, text: str) -> list[int]:
        # The rendered template already holds BOS; LLM.chat encodes the same way.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _holds_control(self, r: ChatRequest | ScoreRequest) -> bool:
        return any(self._control.holds(t) for t in (*(m.content for m in r.messages), r.prefix))

    def _prompt_ids(self, messages: Sequence[Message], prefix: str = "") -> list[int]:
        """The prompt as token ids, control tokens from the template alone."""
        pieces = [m.content for m in self.chat_settings.conversation(messages)] + [prefix]
        return safe_token_ids(
            self._render(messages) + prefix, pieces, self._control, self._encode, lambda t: hf_encode_text(self.tokenizer, t)
        )

    def _first_token(self, candidate: str) -> int | None:
        """The candidate's first token, skipping a bare word-start marker that
        SentencePiece tokenisers put before digits (``"3"`` -> ``["▁", "3"]``)."""
        ids = self._encode(candidate)
        for i in ids:
            if self.tokenizer.decode([i]).strip():
                return i
        return ids[0] if ids else None

    # -- protocol ----------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        # Requests holding control text are sent as safe token ids, like prefixed ones.
        by_ids = [bool(r.prefix) or self._holds_control(r) for r in requests]
        plain = [i for i, r in enumerate(requests) if not by_ids[i]]
        prefixed = [i for i, r in enumerate(requests) if by_ids[i]]
        out: list[Completion | None] = [None] * len(requests)
        for i, c in zip(plain, self._chat([requests[i] for i in plain])):
            out[i] = c
        for i, c in zip(prefixed, self._continue([requests[i] for i in prefixed])):
            out[i] = c
        return out  # type: ignore[return-value]

    def _sampling(self, r: ChatRequest) -> Any:
        return self._vllm.SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_tokens,
            seed=r.seed,
            stop=list(r.stop) or None,
        )

    def _completions(self, outputs: Sequence[Any], truncated: Sequence[bool], seconds: float) -> list[Completion]:
        out = []
        for o, cut in zip(outputs, truncated, strict=True):
            c = o.outputs[0]
            out.append(
                Completion(
                    text=c.text,
                    tokens_in=len(o.prompt_token_ids or ()),
                    tokens_out=len(c.token_ids or ()),
                    seconds=seconds,
                    finish_reason=c.finish_reason or "stop",
                    truncated=cut,
                )
            )
        return out

    def _chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        conversations, params, truncated = [], [], []
        for r in requests:
            msgs, cut = fit_messages(
                r.messages, lambda ms: len(self._encode(self._render(ms))), self.max_model_len - r.max_tokens - MARGIN
            )
            conversations.append(_dicts(self.chat_settings.conversation(msgs)))
            params.append(self._sampling(r))
            truncated.append(cut)
        t0 = time.perf_counter()
        extra = {"chat_template_kwargs": dict(self.chat_settings.template_kwargs)} if self.chat_settings.template_kwargs else {}
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=self.use_tqdm, **extra)
        return self._completions(outputs, truncated, (time.perf_counter() - t0) / len(requests))

    def _continue(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Requests with an assistant ``prefix`` (or holding control text): the rendered
        chat plus the prefix as token ids through ONE ``LLM.generate`` call (as scoring
        does)."""
        if not requests:
            return []
        prompts, params, truncated = [], [], []
        for r in requests:
            msgs, cut = fit_messages(
                r.messages,
                lambda ms, prefix=r.prefix: len(self._prompt_ids(ms, prefix)),
                self.max_model_len - r.max_tokens - MARGIN,
            )
            prompts.append({"prompt_token_ids": self._prompt_ids(msgs, r.prefix)})
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
            msgs, cut = fit_messages(
                r.messages, lambda ms, prefix=r.prefix: len(self._prompt_ids(ms, prefix)), self.max_model_len - MARGIN
            )
            first = {c: self._first_token(c) for c in r.candidates}
            allowed = sorted({i for i in first.values() if i is not None})
            prompts.append({"prompt_token_ids": self._prompt_ids(msgs, r.prefix)})
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
            out.append(
                Completion(
                    text="",
                    tokens_in=len(prompt["prompt_token_ids"]),
                    tokens_out=0,
                    seconds=share,
                    logprobs=scores,
                    truncated=cut,
                )
            )
        return out

    def close(self) -> None:
        # vLLM frees the GPU when the engine is garbage-collected; drop our references.
        self.llm = None  # type: ignore[assignment]
        self.tokenizer = None


@dataclass
class VLLMConfig(BackendConfig):
    """``backend=vllm``'s settings (the model's dtype, length and revision are model.*)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True


def _fingerprint(cfg: DictConfig) -> str:
    return engine_fingerprint(
        cfg.model.hf_id, cfg.model.revision, cfg.model.dtype, int(cfg.model.max_model_len), installed_version("vllm"), ChatSettings.from_model(cfg.model)
    )


def _vllm(cfg: DictConfig) -> Backend:
    return VLLMBackend(
        hf_id=cfg.model.hf_id,
        revision=cfg.model.revision,
        dtype=cfg.model.dtype,
        max_model_len=cfg.model.max_model_len,
        tensor_parallel_size=cfg.backend.tensor_parallel_size,
        gpu_memory_utilization=cfg.backend.gpu_memory_utilization,
        enable_prefix_caching=cfg.backend.enable_prefix_caching,
        seed=cfg.seed,
        batch_size=cfg.backend.batch_size,
        chat=ChatSettings.from_model(cfg.model),
    )


SPEC = register_backend(BackendSpec(
    name="vllm", schema=VLLMConfig, build=_vllm, fingerprint=_fingerprint,
    runtime_only=("batch_size", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching"), package="vllm",
))
