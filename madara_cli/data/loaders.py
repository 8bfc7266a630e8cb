"""Benchmark loaders into :class:`Example` records, and the paper's sampling.

A loader is ``fn(cfg: BenchmarkConfig) -> list[Example]`` returning the whole
(source) split in a stable order; :func:`load_benchmark` then draws the seeded
evaluation sample and the disjoint calibration split.

Every loader reads its rows through :func:`read_rows`, so a benchmark comes either
from the Hugging Face hub (``benchmark.hf_id``/``hf_config``/``split``) or, with
``benchmark.path=FILE``, from a local JSON / JSONL / Parquet / CSV / TSV file in the
same format, through the same code (``datasets.load_dataset("json", data_files=FILE)``).
A local file never touches the hub. When the hub cannot be reached the error is one
line naming the dataset and the ``benchmark.path=`` override, within seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig

from madara_cli.records import Example
from madara_cli.registry import Registry

log = logging.getLogger(__name__)


class DataError(ValueError):
    """Missing or unreadable benchmark data; printed as one line, exit 2."""


LOADERS: Registry[Callable[[DictConfig], list[Example]]] = Registry("benchmark loader")

HUB_PROBE_TIMEOUT_S = 3.0


@LOADERS.register("mini")
def _mini(cfg: DictConfig) -> list[Example]:
    from madara_cli.data.mini import generate

    return generate(n_questions=cfg.n_questions, seed=0)


# ---------------------------------------------------------------------------
# Sources: a local file or the hub, one code path


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, memoised per (path, size, mtime) within the process."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    memo_key = (str(p), st.st_size, st.st_mtime_ns)
    if memo_key not in _SHA_MEMO:
        h = hashlib.sha256()
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _SHA_MEMO[memo_key] = h.hexdigest()
    return _SHA_MEMO[memo_key]


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def source_fingerprint(cfg: DictConfig) -> str:
    """Identity of the rows a benchmark config reads: the file's sha256 for
    ``benchmark.path``, else the hub id, config and split (the mini benchmark: its
    generator size). Part of every retrieval snapshot key."""
    if cfg.get("path"):
        p = Path(cfg.path).expanduser()
        if not p.is_file():
            raise DataError(f"benchmark {cfg.name}: file not found: {p}")
        return f"file:sha256:{file_sha256(p)}"
    if cfg.loader == "mini":
        return f"mini:n{cfg.n_questions}"
    rev = f"@{cfg.revision}" if cfg.get("revision") else ""
    return f"hub:{cfg.hf_id}:{cfg.hf_config}:{cfg.split}{rev}"


_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


def read_local(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a local JSON / JSONL / Parquet / CSV / TSV file through ``datasets``
    (the same reader the hub path uses), in file order."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"benchmark file not found: {p}")
    builder = _FORMATS.get(p.suffix.lower())
    if builder is None:
        raise DataError(f"{p}: unsupported file type '{p.suffix}'; use .json, .jsonl, .parquet, .csv or .tsv")
    kwargs: dict[str, Any] = {"sep": "\t"} if p.suffix.lower() == ".tsv" else {}
    import datasets

    datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(builder, data_files=str(p.resolve()), split="train", **kwargs)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file to fix
        raise DataError(f"{p}: cannot read as {builder}: {_first_line(e)}") from None
    return list(ds)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return " ".join(text[0].split()) if text else type(e).__name__


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _hub_offline_requested() -> bool:
    return _truthy("HF_HUB_OFFLINE") or _truthy("HF_DATASETS_OFFLINE")


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """A TCP connect to the hub endpoint (``HF_ENDPOINT``), bounded by ``timeout``
    even when name resolution hangs. With a proxy configured we cannot tell, so we
    say yes and let ``datasets`` try."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def unreachable(hf_id: str) -> DataError:
    return DataError(
        f"cannot reach the Hugging Face hub for {hf_id} and it is not in the local datasets cache; "
        "download it elsewhere and pass benchmark.path=FILE (a warm cache is read offline by itself; HF_HUB_OFFLINE=1 skips the hub check)"
    )


@contextmanager
def offline_mode() -> Iterator[None]:
    """``datasets`` and ``huggingface_hub`` read ``HF_HUB_OFFLINE`` once, at import:
    set the variables and the libraries' copies of them for the block, then restore."""
    import datasets.config as dcfg

    try:
        import huggingface_hub.constants as hcfg
    except ImportError:  # pragma: no cover
        hcfg = None
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    saved_env = {n: os.environ.get(n) for n in names}
    saved_attrs = [(mod, n, getattr(mod, n)) for mod in (dcfg, hcfg) if mod is not None for n in names if hasattr(mod, n)]
    os.environ.update({n: "1" for n in names})
    for mod, n, _ in saved_attrs:
        setattr(mod, n, True)
    try:
        yield
    finally:
        for n, v in saved_env.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        for mod, n, v in saved_attrs:
            setattr(mod, n, v)


def _load_hub(hf_id: str, config: str | None, split: str, data_files: str | None, revision: str | None):
    import datasets

    if data_files:
        return datasets.load_dataset("json", data_files=data_files, split="train")
    return datasets.load_dataset(hf_id, config, split=split, **({"revision": revision} if revision else {}))


def read_hub(hf_id: str, config: str | None = None, split: str = "test", data_files: str | None = None,
             revision: str | None = None) -> list[dict[str, Any]]:
    """Rows of a hub dataset (or of one raw file in a hub repo, ``data_files=hf://...``),
    at ``revision`` when given.

    Fails fast when the hub is unreachable: a 3-second probe first, instead of the
    ~25 s of retries ``datasets`` spends. Without the hub, a warm local cache is read in
    offline mode (no variable needed); ``HF_HUB_OFFLINE=1`` skips the probe."""
    import datasets

    datasets.disable_progress_bars()
    if not _hub_offline_requested() and not hub_reachable():
        try:
            with offline_mode():
                ds = _load_hub(hf_id, config, split, data_files, revision)
        except Exception:  # noqa: BLE001 - not cached (or not cached at this revision)
            raise unreachable(hf_id) from None
        log.info("hub unreachable: read %s from the local datasets cache", hf_id)
        return list(ds)
    try:
        ds = _load_hub(hf_id, config, split, data_files, revision)
    except Exception as e:  # noqa: BLE001 - classified below into one line
        if _is_connectivity_error(e):
            raise unreachable(hf_id) from None
        raise DataError(
            f"cannot load {hf_id} (config {config}, split {split}{f', revision {revision}' if revision else ''}) from the Hugging Face hub: "
            f"{_first_line(e)}; download it elsewhere and pass benchmark.path=FILE"
        ) from None
    return list(ds)


def _is_connectivity_error(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    if names & {"ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "TimeoutError", "ConnectError", "ReadTimeout"}:
        return True
    text = str(e)
    return any(s in text for s in ("Couldn't reach", "offline mode", "Name or service not known", "Temporary failure in name resolution"))


def read_rows(cfg: DictConfig, data_files: str | None = None) -> list[dict[str, Any]]:
    """The benchmark's rows: ``benchmark.path`` when set, else the hub."""
    if cfg.get("path"):
        return read_local(cfg.path)
    if not cfg.get("hf_id"):
        raise DataError(f"benchmark {cfg.name} has no hub source; pass benchmark.path=FILE")
    return read_hub(cfg.hf_id, cfg.get("hf_config"), cfg.get("split") or "test", data_files=data_files, revision=cfg.get("revision"))


# ---------------------------------------------------------------------------
# Sampling


def split(examples: Sequence[Example], sample: int | None, calibration: int, seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded shuffle; the first ``calibration`` examples form the calibration split
    (RSC probe and NF calibration), the next ``sample`` the evaluated set. The two
    never overlap, and for a fixed seed a smaller ``sample`` is a prefix of a larger
    one. When the source is smaller than calibration + sample, the calibration split
    keeps its size and the evaluated set gets what is left (CONFLICTS: 458 queries ->
    100 calibration + 358 evaluated); only a source of at most ``calibration``
    examples leaves the calibration split empty, so that something is evaluated."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    n = len(order)
    n_cal = calibration if n > calibration else 0
    calib = order[:n_cal]
    rest = order[n_cal:]
    evaluated = rest if sample is None else rest[:sample]
    return evaluated, calib


def load_all_examples(cfg: DictConfig) -> list[Example]:
    """Every example of the source split, after the loader and the answer filter, in
    source order (no sampling)."""
    import madara_cli.data.benchmarks  # noqa: F401  (registers the real loaders)

    try:
        loader = LOADERS.get(cfg.loader)
    except KeyError as e:
        raise DataError(str(e.args[0])) from None
    examples = loader(cfg)
    if cfg.get("require_answers", True):
        examples = [ex for ex in examples if any(a.strip() for a in ex.answers)]
    if not examples:
        raise DataError(f"benchmark {cfg.name}: no examples loaded")
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DataError(f"benchmark {cfg.name}: duplicate example id '{ex.id}'")
        seen.add(ex.id)
    return examples


def load_benchmark(cfg: DictConfig, seed: int, which: str = "eval") -> list[Example]:
    """The evaluated (``which="eval"``) or calibration (``"calibration"``) examples."""
    if which not in ("eval", "calibration"):
        raise ValueError(f"which must be 'eval' or 'calibration', not {which!r}")
    examples = load_all_examples(cfg)
    evaluated, calib = split(examples, cfg.sample, cfg.calibration, seed)
    return evaluated if which == "eval" else calib
