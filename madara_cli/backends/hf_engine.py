"""The transformers engine behind ``backend=hf`` (:mod:`madara_cli.backends.hf` declares
it): a causal LM from ``AutoModelForCausalLM`` in this process, batched the way
lm-evaluation-harness's ``hf`` model batches.

* **Prompts** are rendered by the vLLM backend's
  :class:`~madara_cli.backends.vllm_backend.PromptRenderer` (``chat_template_kwargs``, a
  folded system turn, an assistant prefix, control strings in content encoded as text)
  and go to the model as token ids.
* **Batches**: requests sorted longest prompt first (lm-eval's order: rows of similar
  length pad little, and one that does not fit in memory fails first), cut into
  ``micro_batch`` rows, each left-padded and run as ONE ``generate`` call (chat) or ONE
  forward pass (scores); each completion is reported as its micro-batch ends.
* **Sampling, per request**: each row has its own ``torch.Generator`` seeded with
  :func:`~madara_cli.core.records.sampling_seed`; :class:`RowSampler` applies the row's
  temperature and top-p, draws by the exponential race (``argmax(p / q)``, ``q ~
  Exp(1)``: a draw from ``p``, as vLLM's seeded sampler does) and hands ``generate`` a
  one-hot choice, so ``generate`` runs greedy. A row's tokens depend on its own request
  and seed, never on its batch-mates or their order (up to padding's rounding);
  temperature 0 is argmax. (Grouping by seed would not batch: every request has its own.)
* **Stops, per request** (:class:`RowStopper`): an end-of-sequence token (the model's
  ``generation_config`` ones), the row's ``max_tokens``, or a stop string in its text;
  the reply is cut before the stop string, as vLLM and llama.cpp cut it.
* **Generation settings** are the request's only: ``generation_config`` is replaced by
  one holding the end, pad and start tokens alone, so a checkpoint's defaults (Qwen's
  ``top_k`` 20, ``repetition_penalty`` 1.05) never apply, as on vLLM's offline ``LLM``.
* **Scores**: one forward pass per micro-batch (left-padded, explicit position ids), the
  full-vocabulary log-softmax of the last position; a candidate's value is its first
  token's log-probability (llama.cpp's reading: nothing is ``-inf`` for being outside a
  top list).
* **Truncation**: :func:`~madara_cli.backends.truncate.fit_messages` against
  ``model.max_model_len`` less ``max_tokens``; flagged, never an error.

The wall time of a micro-batch is shared equally between its completions.
"""

from __future__ import annotations

import gc
import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from madara_cli.backends.base import OnDone
from madara_cli.backends.chat import ChatSettings
from madara_cli.core.errors import BackendError, import_failure
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest, sampling_seed

MARGIN = 8  # room for template tokens the count may miss (none, in practice)
TORCH_DTYPES = ("float32", "bfloat16", "float16")


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()] or [type(e).__name__]
    return lines[0][:300]


@dataclass(frozen=True)
class Placement:
    """Where the model computes: ``device`` (``cpu``, ``cuda:1``, ``mps``...), or ``device_map``
    (accelerate spreads the layers; ``device`` is then the first layer's, where inputs go)."""

    device: str
    dtype: str
    device_map: str | None = None


class HFBackend:
    name = "hf"
    # Each micro-batch's completions are reported when it ends (see module docstring).
    reports_each = True

    def __init__(
        self, weights: str, placement: Placement, fingerprint: str, max_len: int = 4096, revision: str | None = None,
        adapter: str | None = None, chat: ChatSettings | None = None, batch_size: int = 256, micro_batch: int = 16,
        n_threads: int | None = None,
    ):
        """``weights``: a hub id (at ``revision``) or a local folder; ``fingerprint``: their
        identity as :mod:`madara_cli.backends.hf` computed it without loading them."""
        try:
            import torch
            import transformers
        except (ImportError, OSError) as e:
            raise BackendError(import_failure("backend=hf", e, "torch and transformers: pip install 'madara[hf]'")) from None
        from madara_cli.backends.vllm_backend import PromptRenderer

        _quiet(transformers)
        self._torch = torch
        if n_threads or placement.device == "cpu":
            from madara_cli.backends.llamacpp import default_threads

            # torch's threads wait for each other spinning, as llama.cpp's do: on cores
            # other processes hold, fewer threads are faster (see default_threads)
            torch.set_num_threads(int(n_threads or default_threads()))
        self._fingerprint = fingerprint
        self._batch_size = int(batch_size)
        self.micro_batch = max(1, int(micro_batch))
        self.max_len = int(max_len)
        self.placement = placement
        self.chat_settings = chat or ChatSettings()
        where = f"{weights}@{revision}" if revision else weights
        hub = {"revision": revision} if revision else {}
        try:  # the model first: a folder it cannot read says so, rather than what its tokenizer lacks
            model = transformers.AutoModelForCausalLM.from_pretrained(
                weights, dtype=getattr(torch, placement.dtype), device_map=placement.device_map, **hub
            )
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(weights, **hub)
        except Exception as e:  # noqa: BLE001 - offline, gated, unknown architecture, bad folder: the user's to fix
            raise BackendError(f"transformers could not load {where}: {_one_line(e)}") from None
        limit = getattr(model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and 0 < limit < self.max_len:
            raise BackendError(
                f"{where} holds {limit} positions, fewer than model.max_model_len={self.max_len}: set model.max_model_len={limit}"
            )
        self.eos_ids = _eos_ids(model, self.tokenizer)
        if not self.eos_ids:
            raise BackendError(f"{where} names no end-of-sequence token (generation_config or tokenizer): generation could not stop")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        # on the base model, before an adapter wraps it: peft's generate hands the base its config
        model.generation_config = transformers.GenerationConfig(
            eos_token_id=self.eos_ids, pad_token_id=self.pad_id, bos_token_id=model.generation_config.bos_token_id
        )
        if placement.device_map is None:
            try:
                model = model.to(placement.device)
            except Exception as e:  # noqa: BLE001 - out of memory, no such device
                raise BackendError(f"cannot place {where} on {placement.device}: {_one_line(e)}") from None
        if adapter:
            try:
                from peft import PeftModel
            except ImportError:
                raise BackendError("backend.adapter needs peft: pip install 'madara[peft]'") from None
            try:
                model = PeftModel.from_pretrained(model, adapter)
            except Exception as e:  # noqa: BLE001 - not an adapter folder, or one for another base model
                raise BackendError(f"peft could not load the adapter {adapter} onto {where}: {_one_line(e)}") from None
        model.eval()
        self.model = model
        self.device = torch.device(placement.device)
        self.render = PromptRenderer(self.tokenizer, self.chat_settings)
        forward = getattr(model, "get_base_model", lambda: model)().forward
        self._keeps_last = "logits_to_keep" in inspect.signature(forward).parameters

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def batch_size(self) -> int:
        return self._batch_size

    # -- protocol ----------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest], on_done: OnDone | None = None) -> list[Completion]:
        prompts = [self.render.fitted_ids(r, self.max_len - r.max_tokens - MARGIN) for r in requests]
        return self._in_batches(requests, prompts, self._generate, on_done)

    def next_token_logprobs(self, requests: Sequence[ScoreRequest], on_done: OnDone | None = None) -> list[Completion]:
        return self._in_batches(requests, [self.render.fitted_ids(r, self.max_len - MARGIN) for r in requests], self._score, on_done)

    def close(self) -> None:
        cuda = self.device.type == "cuda"
        self.model = None  # type: ignore[assignment]
        gc.collect()
        if cuda:
            self._torch.cuda.empty_cache()

    # -- batching ----------------------------------------------------------------

    def _in_batches(self, requests: Sequence, prompts: list[tuple[list[int], bool]], run: Callable, on_done: OnDone | None) -> list[Completion]:
        """``run`` over micro-batches, longest prompt first; completions in the order asked,
        each to ``on_done`` as its batch ends."""
        order = sorted(range(len(requests)), key=lambda i: -len(prompts[i][0]))
        out: list[Completion | None] = [None] * len(requests)
        for start in range(0, len(order), self.micro_batch):
            rows = order[start : start + self.micro_batch]
            t0 = time.perf_counter()
            done = run([requests[i] for i in rows], [prompts[i][0] for i in rows])
            share = (time.perf_counter() - t0) / len(rows)
            for i, c in zip(rows, done, strict=True):
                out[i] = Completion(**{**c, "seconds": share, "truncated": prompts[i][1]})
                if on_done is not None:
                    on_done(i, out[i])
        return out  # type: ignore[return-value]

    def left_padded(self, ids: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        """Input ids and attention mask of ``ids`` padded on the left to one length."""
        torch = self._torch
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, x in enumerate(ids):
            if x:
                input_ids[row, width - len(x) :] = torch.tensor(x, dtype=torch.long)
                mask[row, width - len(x) :] = 1
        return input_ids.to(self.device), mask.to(self.device)

    def _generate(self, requests: Sequence[ChatRequest], ids: list[list[int]]) -> list[dict[str, Any]]:
        torch = self._torch
        input_ids, mask = self.left_padded(ids)
        width = input_ids.shape[1]
        sampler = RowSampler(torch, [(r.temperature, r.top_p, sampling_seed(r)) for r in requests], self.device)
        stopper = RowStopper(self.tokenizer, width, self.eos_ids, [r.max_tokens for r in requests], [r.stop for r in requests])
        from transformers import LogitsProcessorList, StoppingCriteriaList

        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=max(r.max_tokens for r in requests), do_sample=False,
                logits_processor=LogitsProcessorList([sampler]), stopping_criteria=StoppingCriteriaList([stopper]),
            )
        rows = out[:, width:].tolist()
        return [stopper.completion(i, row, len(x)) for i, (row, x) in enumerate(zip(rows, ids, strict=True))]

    def _score(self, requests: Sequence[ScoreRequest], ids: list[list[int]]) -> list[dict[str, Any]]:
        torch = self._torch
        input_ids, mask = self.left_padded(ids)
        # Left padding shifts each row's positions; generate derives them from the mask,
        # a plain forward pass must be given them.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        keep = {"logits_to_keep": 1} if self._keeps_last else {}
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, **keep).logits[:, -1, :]
            logp = torch.log_softmax(logits.float(), dim=-1).cpu()
        firsts = [{c: self.render.first_token(c) for c in r.candidates} for r in requests]
        return [{"text": "", "tokens_in": len(x), "tokens_out": 0,
                 "logprobs": {c: float(logp[row, t]) if t is not None else -math.inf for c, t in first.items()}}
                for row, (first, x) in enumerate(zip(firsts, ids, strict=True))]


def _quiet(transformers: Any) -> None:
    """Silence transformers' warnings and loading bars, which drown madara's lines (``-v`` shows them)."""
    import logging

    if not logging.getLogger("madara_cli").isEnabledFor(logging.INFO):
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a reply: generation_config's (Llama-3 lists several), else the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return [int(i) for i in ids]


class RowSampler:
    """A logits processor sampling each row from a generator of its own (temperature, top-p,
    exponential race) into a one-hot choice for ``generate``'s greedy step; temperature <= 0 is argmax."""

    def __init__(self, torch: Any, rows: Sequence[tuple[float, float, int]], device: Any):
        self.torch = torch
        self.rows = list(rows)
        # A generator on the device draws there (no copy per step); CUDA has them, for
        # other devices the draws are made on the CPU and moved.
        self.draw_on = device if getattr(device, "type", str(device)) == "cuda" else torch.device("cpu")
        self.generators = [
            torch.Generator(device=self.draw_on).manual_seed(int(seed)) if temperature > 0 else None for temperature, _, seed in self.rows
        ]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = self.torch
        choice = torch.full_like(scores, -math.inf)
        for i, ((temperature, top_p, _), gen) in enumerate(zip(self.rows, self.generators, strict=True)):
            row = scores[i]
            if gen is None:
                pick = int(torch.argmax(row))
            else:
                probs = torch.softmax(row.float() / float(temperature), dim=-1)
                if top_p < 1.0:
                    probs = nucleus(torch, probs, float(top_p))
                q = torch.empty(probs.shape, dtype=torch.float32, device=self.draw_on).exponential_(generator=gen).to(probs.device)
                pick = int(torch.argmax(probs / q))
            choice[i, pick] = 0.0
        return choice


def nucleus(torch: Any, probs: Any, top_p: float) -> Any:
    """``probs`` zeroed outside the smallest most-likely set whose mass reaches ``top_p`` (the top token always stays)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each token
    drop = before >= top_p
    drop[0] = False
    return probs.scatter(0, order, sorted_probs.masked_fill(drop, 0.0))


class RowStopper:
    """Per-row stopping: an end token, the row's ``max_tokens``, or a stop string in its text;
    where and why each row ended is kept for :meth:`completion`."""

    def __init__(self, tokenizer: Any, prompt_width: int, eos_ids: Sequence[int], max_tokens: Sequence[int], stops: Sequence[Sequence[str]]):
        self.tokenizer = tokenizer
        self.prompt_width = prompt_width
        self.eos = set(eos_ids)
        self.max_tokens = list(max_tokens)
        self.stops = [tuple(s for s in row if s) for row in stops]
        # Tokens decoded to look for a stop string: a token holds at least one byte, a character at most four.
        self.window = [4 * max((len(s) for s in row), default=0) + 8 for row in self.stops]
        self.ended: list[tuple[int, str] | None] = [None] * len(self.max_tokens)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        step = input_ids.shape[1] - self.prompt_width
        last = input_ids[:, -1].tolist()
        for i, token in enumerate(last):
            if self.ended[i] is not None:
                continue
            if token in self.eos:
                self.ended[i] = (step, "eos")
            elif self.stops[i] and self._holds_stop(i, input_ids[i, max(self.prompt_width, input_ids.shape[1] - self.window[i]) :]):
                self.ended[i] = (step, "stop")
            elif step >= self.max_tokens[i]:
                self.ended[i] = (step, "length")
        return torch.tensor([e is not None for e in self.ended], dtype=torch.bool, device=input_ids.device)

    def _holds_stop(self, i: int, tail: Any) -> bool:
        text = self.tokenizer.decode(tail.tolist(), skip_special_tokens=True)
        return any(s in text for s in self.stops[i])

    def completion(self, i: int, generated: list[int], tokens_in: int) -> dict[str, Any]:
        """Row ``i``'s reply from its generated ids (pads after its end included)."""
        step, why = self.ended[i] or (min(len(generated), self.max_tokens[i]), "length")
        tokens = generated[:step]
        text = self.tokenizer.decode(tokens[:-1] if why == "eos" else tokens, skip_special_tokens=True)
        cut = min((at for at in (text.find(s) for s in self.stops[i]) if at >= 0), default=-1)
        if cut >= 0:
            text, why = text[:cut], "stop"
        return {"text": text, "tokens_in": tokens_in, "tokens_out": len(tokens), "finish_reason": "length" if why == "length" else "stop"}


def random_model_like(source: str, out: str, seed: int = 0, layers: int = 2, hidden: int = 64, init_range: float = 0.5) -> str:
    """A small random-weight causal LM in ``out`` with the architecture, vocabulary, tokenizer
    and chat template of the folder ``source``: for engine checks where no weights can be
    downloaded (it says nothing about accuracy). A large ``init_range`` makes next-token
    distributions peaked, so a greedy reply does not hinge on rounding."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    _quiet(transformers)
    config = AutoConfig.from_pretrained(source)
    heads = max(1, hidden // 16)
    config.update({"num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_attention_heads": heads,
                   "num_key_value_heads": max(1, heads // 2), "head_dim": hidden // heads, "initializer_range": init_range})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out
