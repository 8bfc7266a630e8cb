"""Backends: one protocol (base.Backend), several engines, one cache in front.

Every engine module declares a :class:`~madara_cli.backends.base.BackendSpec` and
registers it in the one catalog; the one loader
(:func:`madara_cli.composition.plugins.load_plugins`) imports every module of this
package, so a new shipped backend is one module plus one ``configs/backend/<name>.yaml``.
"""

from __future__ import annotations

from madara_cli.backends.base import Backend, BackendSpec
from madara_cli.config.settings import Settings
from madara_cli.plugins.catalog import CATALOG


def make_backend(cfg: Settings) -> Backend:
    """Build the engine named by ``cfg.backend.name`` for ``cfg.model``."""
    return CATALOG.get("backend", str(cfg.backend.name)).build(cfg)


def backend_fingerprint(cfg: Settings) -> str:
    """The cache fingerprint ``make_backend(cfg)`` would have, without loading a model."""
    return CATALOG.get("backend", str(cfg.backend.name)).fingerprint(cfg)


def prepare_backend(cfg: Settings, say=lambda m: None) -> str:
    """Make ready what ``make_backend(cfg)`` loads, without loading it; what is where."""
    spec = CATALOG.get("backend", str(cfg.backend.name))
    return spec.prepare(cfg, say) if spec.prepare else f"backend {spec.name} needs nothing prepared for model {cfg.model.name}"


def engine_package(name: str | None) -> str | None:
    """The distribution whose version provenance records for backend ``name``."""
    spec = CATALOG.find("backend", str(name))
    return spec.package if spec is not None else None


__all__ = ["Backend", "BackendSpec", "backend_fingerprint", "engine_package", "make_backend", "prepare_backend"]
