"""Backends: one protocol (base.Backend), several engines, one cache in front."""

from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig

from madara_cli.backends.base import Backend
from madara_cli.errors import BackendError
from madara_cli.registry import Registry

BACKENDS: Registry[Callable[[DictConfig], Backend]] = Registry("backend")


@BACKENDS.register("llamacpp")
def _llamacpp(cfg: DictConfig) -> Backend:
    from madara_cli.backends.chat import ChatSettings
    from madara_cli.backends.llamacpp import LlamaCppBackend

    if not cfg.model.gguf:
        raise BackendError(
            f"model {cfg.model.name} has no GGUF file for llama.cpp; set model.gguf=/path/to/file.gguf or use backend=vllm"
        )
    return LlamaCppBackend(
        gguf=cfg.model.gguf,
        n_ctx=cfg.backend.n_ctx or cfg.model.max_model_len,
        n_threads=cfg.backend.n_threads,
        seed=cfg.seed,
        batch_size=cfg.backend.batch_size,
        chat=ChatSettings.from_model(cfg.model),
    )


def make_backend(cfg: DictConfig) -> Backend:
    """Build the engine named by ``cfg.backend.name`` for ``cfg.model``."""
    # Optional engines register themselves on import; a missing extra is reported by
    # the engine's own factory with the install command.
    for mod in ("vllm", "openai"):
        try:
            __import__(f"madara_cli.backends.{mod}_backend")
        except ModuleNotFoundError as e:
            if e.name != f"madara_cli.backends.{mod}_backend":
                raise
    try:
        factory = BACKENDS.get(cfg.backend.name)
    except KeyError as e:
        raise BackendError(str(e.args[0])) from None
    return factory(cfg)


__all__ = ["Backend", "BACKENDS", "make_backend"]
