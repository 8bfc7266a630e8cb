"""Backends: one protocol (base.Backend), several engines, one cache in front.

Every engine module declares a :class:`~madara_cli.backends.base.BackendSpec` and
registers it; :func:`load_builtin` imports the modules of this package, so a new
shipped backend is one module plus one ``configs/backend/<name>.yaml``.
"""

from __future__ import annotations

import importlib
import pkgutil

from omegaconf import DictConfig

from madara_cli.backends.base import BACKENDS, Backend, BackendSpec, register_backend
from madara_cli.errors import BackendError

_LOADED = False


def load_builtin() -> None:
    """Import every module of this package, so that each engine registers its spec (the
    engines import their optional libraries only when built)."""
    global _LOADED
    if _LOADED:
        return
    import madara_cli.backends as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"madara_cli.backends.{mod.name}")
    _LOADED = True


def backend_spec(name: str) -> BackendSpec:
    """The registered backend ``name``; BackendError naming the registered ones otherwise."""
    load_builtin()
    try:
        return BACKENDS.get(name)
    except KeyError as e:
        raise BackendError(str(e.args[0])) from None


def make_backend(cfg: DictConfig) -> Backend:
    """Build the engine named by ``cfg.backend.name`` for ``cfg.model``."""
    return backend_spec(str(cfg.backend.name)).build(cfg)


def backend_fingerprint(cfg: DictConfig) -> str:
    """The cache fingerprint ``make_backend(cfg)`` would have, without loading a model."""
    return backend_spec(str(cfg.backend.name)).fingerprint(cfg)


def backend_key_fragment(cfg: DictConfig) -> dict[str, str]:
    """What the keys of ``cfg``'s cells and probes add for its backend beyond its
    settings (:attr:`BackendSpec.key_fragment`); empty for most backends (and for a
    name no backend has registered: composing refuses that one)."""
    load_builtin()
    spec = BACKENDS.find(str(cfg.backend.name))
    return dict(spec.key_fragment(cfg)) if spec is not None and spec.key_fragment else {}


def with_key_fragment(identity: dict, cfg: DictConfig) -> dict:
    """``identity`` (a cell's or probe's) with the backend's key fragment under
    ``backend.key_fragment``; unchanged when the backend declares none."""
    fragment = backend_key_fragment(cfg)
    if fragment:
        identity["backend"] = {**identity["backend"], "key_fragment": fragment}
    return identity


def prepare_backend(cfg: DictConfig, say=lambda m: None) -> str:
    """Make ready what ``make_backend(cfg)`` loads, without loading it; what is where."""
    spec = backend_spec(str(cfg.backend.name))
    return spec.prepare(cfg, say) if spec.prepare else f"backend {spec.name} needs nothing prepared for model {cfg.model.name}"


def engine_package(name: str | None) -> str | None:
    """The distribution whose version provenance records for backend ``name``."""
    load_builtin()
    spec = BACKENDS.find(name)
    return spec.package if spec is not None else None


__all__ = ["Backend", "BackendError", "BackendSpec", "BACKENDS", "backend_fingerprint", "backend_key_fragment", "backend_spec", "engine_package",
           "load_builtin", "make_backend", "prepare_backend", "register_backend", "with_key_fragment"]
