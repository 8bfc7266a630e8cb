"""Hugging Face transformers backend (``backend=hf``): ``AutoModelForCausalLM`` in madara's
own process, batched as lm-evaluation-harness's ``hf`` model is (the engine:
:mod:`.hf_engine`).

What it loads (``model.hf_source``, as on vLLM): ``hub`` is ``model.hf_id`` at
``model.revision``; ``gguf`` the folder made once from ``model.gguf``
(:func:`~madara_cli.backends.weights.hf_folder_from_gguf`: the embedded SmolLM2 runs by
name); else a local model folder. Settings (``configs/backend/hf.yaml``):

* ``device``: ``auto`` (CUDA, else MPS, else CPU), ``cpu``, ``cuda``, ``cuda:N``, ``mps``;
  ``device_map`` (``auto``, ``balanced``, ...) instead spreads a model over all GPUs.
* ``dtype``: null is bfloat16 on a GPU, float32 on the CPU (the embedded model's weights
  are a GGUF's Q4_1 blocks dequantised, which float32 holds exactly).
* ``adapter``: a PEFT adapter folder (a LoRA not merged into its base), applied on load.
* ``micro_batch``: rows per ``generate`` call or forward pass; ``batch_size``: requests
  the cache hands over at once; ``n_threads``: torch's CPU threads (null: on the CPU, the
  physical cores other processes leave free, as for llama.cpp, since torch's threads also
  spin: with load 4 on 2 cores a 3 x 300-token forward pass took 25 s on two threads, 14
  s on one, logits bit-identical).

**Identity.** The fingerprint and cell key hold what the weights *are*, not where they
lie: the hub commit (from the local hub cache: ``loads_hub``), the GGUF's hash, or a
digest of a local folder's files (``model_inputs``); the adapter by a digest of its files
(an input field); and the dtype and device kind ``auto``/null resolve to here
(``resolves``: a GPU and a laptop are not the same numbers). All of it is composed in
:mod:`madara_cli.config.identity`, whose digests are memoised on each file's stamp (a
multi-gigabyte folder is read once). The fingerprint adds the context length and the
transformers, torch (and, with an adapter, peft) releases.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from madara_cli.backends.base import THREADS, Backend, BackendSpec, installed_version
from madara_cli.backends.base import importable as _have
from madara_cli.backends.chat import ChatSettings
from madara_cli.backends.weights import (
    download_hub,
    file_fingerprint,
    find_named_rows,
    hf_folder_from_gguf,
    hf_source,
    hf_source_inputs,
    loads_hub_source,
    resolve_gguf,
)
from madara_cli.config.identity import folder_digest
from madara_cli.config.schema import BackendConfig, input_field
from madara_cli.config.settings import Settings
from madara_cli.core.errors import BackendError, ConfigError, import_failure
from madara_cli.core.hub import COMMIT, resolved_revision
from madara_cli.plugins import register

GPU_DTYPE = "bfloat16"
CPU_DTYPE = "float32"
DEVICE_KINDS = ("cpu", "cuda", "mps")


@dataclass
class HFConfig(BackendConfig):
    """``backend=hf``'s settings (the model's length, revision and hf_source are model.*)."""

    batch_size: int = 256
    micro_batch: int = 16
    device: str = "auto"
    dtype: Optional[str] = None  # None: bfloat16 on a GPU, float32 on the CPU
    device_map: Optional[str] = None  # accelerate's placement over several GPUs (then device is not set)
    adapter: Optional[str] = input_field("folder", help="a PEFT adapter folder (keys hold its content)")
    n_threads: Optional[int] = None  # torch's CPU threads; None: on the CPU, the physical cores other processes leave free


@dataclass(frozen=True)
class EngineSettings:
    """What the engine loads and how it computes, from a composed config, without
    loading anything (``madara plan`` fingerprints the engine with it)."""

    hf_id: str
    weights: str  # "hub@<commit or revision>", "gguf:<file>:<sha>", "dir:<digest>"
    adapter: str  # "" or "adapter:<digest>"
    dtype: str
    device_kind: str
    max_len: int
    transformers: str
    torch: str
    peft: str
    chat: ChatSettings = ChatSettings()

    def resolved(self) -> dict[str, str]:
        """What ``backend.dtype`` and ``backend.device`` resolve to here (keys hold these)."""
        return {"dtype": self.dtype, "device": self.device_kind}

    def fingerprint(self) -> str:
        adapter = f":{self.adapter}:peft-{self.peft}" if self.adapter else ""
        # ":rows": each row sampled from a generator of its own (hf_engine.RowSampler)
        return (f"hf:{self.hf_id}@{self.weights}{adapter}:{self.dtype}:{self.device_kind}:len{self.max_len}"
                f":transformers-{self.transformers}:torch-{self.torch}:rows{self.chat.fingerprint()}")


def weights_identity(cfg: Settings) -> str:
    model = cfg.model
    source = hf_source(cfg)
    if source == "gguf":
        if not model.get("gguf"):
            raise BackendError(f"model {model.name} has hf_source: gguf but no model.gguf file")
        return file_fingerprint(resolve_gguf(str(model.gguf)))
    if source == "hub":
        return f"hub@{resolved_revision(str(model.hf_id), str(model.revision)) or model.revision}"
    return f"dir:{folder_digest(_model_folder(source))[:16]}"


def _model_folder(source: str) -> Path:
    folder = Path(source).expanduser()
    if not (folder / "config.json").is_file():
        raise BackendError(f"model.hf_source={source}: no config.json there (a Hugging Face model folder, 'hub' or 'gguf')")
    return folder


def _adapter_folder(path: str) -> Path:
    folder = Path(path).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise BackendError(f"backend.adapter={path}: no adapter_config.json there (a PEFT adapter folder, as save_pretrained writes it)")
    return folder


def torch_module():
    """torch, imported; a torch that is missing or cannot be loaded is one BackendError line."""
    try:
        import torch
    except (ImportError, OSError) as e:
        raise BackendError(import_failure("backend=hf", e, "torch: pip install torch")) from None
    return torch


def device_kind(device: str, device_map: str | None) -> str:
    """``cpu``, ``cuda`` or ``mps``: what ``device`` (or a ``device_map``) resolves to on
    this machine. ``auto`` asks torch (imported here; without torch, ``cpu``)."""
    if device != "auto":
        return device.split(":")[0]
    if not _have("torch"):
        return "cpu"
    torch = torch_module()
    if torch.cuda.is_available():
        return "cuda"
    if device_map is None and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _check(cfg: Settings) -> None:
    from madara_cli.backends.hf_engine import TORCH_DTYPES

    b = cfg.backend
    device, device_map, dtype = str(b.device), b.get("device_map"), b.get("dtype")
    if device != "auto" and device.split(":")[0] not in DEVICE_KINDS or device.count(":") > 1 or (
        ":" in device and not device.split(":")[1].isdigit()
    ):
        raise ConfigError(f"backend.device={device!r}: use auto, cpu, cuda, cuda:N or mps")
    if device_map and device != "auto":
        raise ConfigError("backend.device_map places the model itself: leave backend.device at auto")
    if dtype is not None and str(dtype) not in TORCH_DTYPES:
        raise ConfigError(f"backend.dtype={dtype!r}: use one of {', '.join(TORCH_DTYPES)} (or null: bfloat16 on a GPU, float32 on the CPU)")
    if int(b.micro_batch) < 1:
        raise ConfigError(f"backend.micro_batch={b.micro_batch}: at least 1")


def engine_settings(cfg: Settings) -> EngineSettings:
    _check(cfg)
    b = cfg.backend
    kind = device_kind(str(b.device), b.get("device_map"))
    adapter = b.get("adapter")
    return EngineSettings(
        hf_id=str(cfg.model.hf_id), weights=weights_identity(cfg),
        adapter=f"adapter:{folder_digest(_adapter_folder(str(adapter)))[:16]}" if adapter else "",
        dtype=str(b.get("dtype") or (CPU_DTYPE if kind == "cpu" else GPU_DTYPE)), device_kind=kind,
        max_len=int(cfg.model.max_model_len), transformers=installed_version("transformers"), torch=installed_version("torch"),
        peft=installed_version("peft") if adapter else "", chat=ChatSettings.from_model(cfg.model),
    )


def weights_for(cfg: Settings, say=None) -> str:
    """What ``from_pretrained`` loads: the hub id, the folder made from the GGUF, or the
    local folder."""
    source = hf_source(cfg)
    if source == "hub":
        return str(cfg.model.hf_id)
    if source == "gguf":
        lacking = [m for m in ("gguf", "accelerate") if not _have(m)]
        if lacking and not _converted(cfg):
            raise BackendError(f"model {cfg.model.name} is loaded from a folder made once from its GGUF, which needs "
                               f"{' and '.join(lacking)}: pip install 'madara[hf]' (or set model.hf_source to a model folder)")
        return str(hf_folder_from_gguf(str(cfg.model.gguf), say=say))
    return str(_model_folder(source))


def _converted(cfg: Settings) -> bool:
    from madara_cli.backends.weights import gguf_folder

    folder = gguf_folder(str(cfg.model.gguf))
    return (folder / "config.json").is_file() and (folder / "madara-source.json").is_file()


NOT_INSTALLED = "backend=hf needs torch and transformers: pip install 'madara[hf]' (on a CPU-only machine, torch's CPU wheel first)"


def _missing() -> str | None:
    return None if _have("torch") and _have("transformers") else NOT_INSTALLED


def _build(cfg: Settings) -> Backend:
    if (why := _missing()) is not None:
        raise BackendError(why)
    settings = engine_settings(cfg)
    b = cfg.backend
    if b.get("adapter") and not _have("peft"):
        raise BackendError("backend.adapter needs peft: pip install 'madara[peft]'")
    if b.get("device_map") and not _have("accelerate"):
        raise BackendError("backend.device_map needs accelerate: pip install accelerate")
    from madara_cli.backends.hf_engine import HFBackend, Placement

    device = _device(str(b.device), settings.device_kind, b.get("device_map"))
    weights = weights_for(cfg, say=logging.getLogger("madara_cli.core.progress").info)
    hub = hf_source(cfg) == "hub"
    backend = HFBackend(
        weights=weights, placement=Placement(device=device, dtype=settings.dtype, device_map=b.get("device_map")),
        fingerprint=settings.fingerprint(), max_len=settings.max_len,
        revision=(settings.weights.split("@", 1)[1] if hub else None), adapter=b.get("adapter"), chat=settings.chat,
        batch_size=int(b.batch_size), micro_batch=int(b.micro_batch), n_threads=b.get("n_threads"),
    )
    if hub and not COMMIT.match(settings.weights.split("@", 1)[1]):
        # downloaded just now: the commit it named is known from here on (as on vLLM;
        # madara prepare downloads first, so the first cell is keyed by it already)
        backend._fingerprint = engine_settings(cfg).fingerprint()
    return find_named_rows(backend, cfg)


def _device(device: str, kind: str, device_map: str | None) -> str:
    """The torch device the inputs go to; a GPU that is asked for and absent is one line."""
    torch = torch_module()
    if kind == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"backend.device={device}: torch sees no CUDA device here (torch {torch.__version__}); use backend.device=cpu")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise BackendError(f"backend.device={device}: torch sees no MPS device here; use backend.device=cpu")
    if device_map:
        return "cuda:0" if kind == "cuda" else kind
    return kind if device == "auto" else device


def _fingerprint(cfg: Settings) -> str:
    return engine_settings(cfg).fingerprint()


def _resolves(cfg: Settings) -> dict[str, str]:
    return engine_settings(cfg).resolved()


def _prepare(cfg: Settings, say) -> str:
    settings = engine_settings(cfg)
    weights = weights_for(cfg, say=say)
    if hf_source(cfg) == "hub":
        weights = download_hub(cfg, say)
        settings = engine_settings(cfg)
    return f"transformers loads {cfg.model.name} from {weights}; engine identity {settings.fingerprint()}"


SPEC = register(BackendSpec(
    name="hf", schema=HFConfig, build=_build, fingerprint=_fingerprint, prepare=_prepare,
    # the rows of a generate call change its rounding only (tests/backends/test_hf_backend.py
    # measures it); device_map places layers; the thread count changes speed.
    runtime_only=("batch_size", "micro_batch", "device_map", "n_threads"),
    package="transformers", model_settings=("hf_source",), worker_threads="n_threads", missing=_missing,
    model_inputs=hf_source_inputs, loads_hub=loads_hub_source, resolves=_resolves, ranges={"n_threads": THREADS},
))
