"""The backend contract: a batch of requests in, a list of completions out, same order.

The shape follows vLLM's offline API (``LLM.chat(conversations, sampling_params)``
takes a whole batch with per-request sampling parameters) so that every engine fits
without change: llama.cpp runs the batch sequentially, vLLM in one call, an
OpenAI-compatible server with bounded concurrency.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

from madara_cli.records import ChatRequest, Completion, ScoreRequest

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
