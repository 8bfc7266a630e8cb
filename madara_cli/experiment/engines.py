"""The engines a run keeps open: one per (model, backend, seed), in front of one response cache
per file. The runner, the probe-and-route step (:mod:`.treat`) and an LLM reranker
(:mod:`.examples`) ask a pool for a config's engine, so a model's cells load the weights once."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from madara_cli.backends import make_backend
from madara_cli.backends.base import Backend
from madara_cli.backends.cache import CachedLLM, ProgressFn, ResponseCache
from madara_cli.config.settings import Settings


class EnginePool:
    """Engines keyed by (model, backend) plus one shared response cache per path.
    ``with EnginePool(progress) as pool:`` closes every engine and cache on the way out."""

    def __init__(self, progress: ProgressFn | None = None, factory: Callable[[Settings], Backend] = make_backend,
                 cache_factory: Callable[[str], ResponseCache] = ResponseCache):
        self._engines: dict[tuple, CachedLLM] = {}
        self._caches: dict[str, ResponseCache] = {}
        self._progress = progress
        self._factory = factory
        self._cache_factory = cache_factory  # launch.py: per-worker shards on cluster launchers

    def get(self, cfg: Settings) -> CachedLLM:
        ident = (cfg.model, cfg.backend, int(cfg.seed))  # plain nodes: equal settings, one engine
        if ident not in self._engines:
            # One engine at a time: a GPU holds one 7-32B model, and grids run a model's cells back to back.
            for old in self._engines.values():
                old.backend.close()
            self._engines.clear()
            cache_path = str(Path(cfg.cache).resolve())
            if cache_path not in self._caches:
                self._caches[cache_path] = self._cache_factory(cache_path)
            cache = self._caches[cache_path]
            self._engines[ident] = CachedLLM(self._factory(cfg), cache, self._progress)
        return self._engines[ident]

    def close(self) -> None:
        for llm in self._engines.values():
            llm.backend.close()
        for cache in self._caches.values():
            cache.close()
        self._engines.clear()
        self._caches.clear()

    def __enter__(self) -> "EnginePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
