"""A backend that exists only in tests/: one module (this file, loaded with
``--include tests/plugins``) plus one yaml (``backend/toy.yaml`` in a ``--config-dir``).
It answers every chat request with ``backend.reply`` and every score request with a
fixed preference for the first candidate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from madara_cli.backends.base import BackendSpec
from madara_cli.config.schema import BackendConfig
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.plugins import register

BUILT: list[str] = []  # the replies of every engine built (the test reads it in process)


@dataclass
class ToyConfig(BackendConfig):
    reply: str = "Paris"  # every generated text
    pause_s: float = 0.0  # runtime-only: no number depends on it


class ToyBackend:
    name = "toy"

    def __init__(self, reply: str, batch_size: int):
        self.reply, self._batch = reply, batch_size

    @property
    def fingerprint(self) -> str:
        return f"toy:{self.reply}"

    @property
    def batch_size(self) -> int:
        return self._batch

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return [Completion(text=self.reply, tokens_in=1, tokens_out=1) for _ in requests]

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        return [Completion(text="", logprobs={c: -float(i) for i, c in enumerate(r.candidates)}) for r in requests]

    def close(self) -> None:
        pass


def _build(cfg) -> ToyBackend:
    BUILT.append(str(cfg.backend.reply))
    return ToyBackend(str(cfg.backend.reply), int(cfg.backend.batch_size))


SPEC = register(BackendSpec(
    name="toy", schema=ToyConfig, build=_build, fingerprint=lambda cfg: f"toy:{cfg.backend.reply}",
    runtime_only=("batch_size", "pause_s"), package=None,
))
