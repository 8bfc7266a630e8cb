"""Where a benchmark's rows come from: a local file or the Hugging Face hub, one code path.

Every loader (:mod:`madara_cli.data.loaders.benchmarks`, plug-ins) reads its rows through
:func:`read_rows`, so a benchmark comes either from the hub
(``benchmark.hf_id``/``hf_config``/``split``) or, with ``benchmark.path=FILE``, from a
local JSON / JSONL / Parquet / CSV / TSV file in the same format, through the same
code (``datasets.load_dataset("json", data_files=FILE)``). A local file never touches
the hub. When the hub cannot be reached the error is one line naming the dataset and
the ``benchmark.path=`` override, within seconds. :func:`source_fingerprint` names the
rows read (part of every retrieval snapshot key).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig

from madara_cli.config.identity import file_digest
from madara_cli.errors import DataError
from madara_cli.jsonl import ENCODING, parse_line
from madara_cli.paths import utf8_error

log = logging.getLogger(__name__)



HUB_PROBE_TIMEOUT_S = 3.0


def not_utf8(path: str | Path, what: str = "file") -> DataError | None:
    """The one-line error for a text file that is not UTF-8, or None when it is."""
    where = utf8_error(path)
    if where is None:
        return None
    return DataError(f"{path}: {what} is not UTF-8 text: {where}; save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def source_fingerprint(cfg: DictConfig) -> str:
    """Identity of the rows a benchmark config reads: the file's sha256 for
    ``benchmark.path``, else the hub id, config and split (the mini benchmark: its
    generator size). Part of every retrieval snapshot key."""
    if cfg.get("path"):
        p = Path(cfg.path).expanduser()
        if not p.is_file():
            raise DataError(f"benchmark {cfg.name}: file not found: {p}")
        return f"file:sha256:{file_digest(p)}"
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
    if builder in ("json", "csv") and not _has_content(p):
        raise DataError(f"{p}: the file is empty (no rows)")
    if builder in ("json", "csv") and (bad := not_utf8(p, "the benchmark file")) is not None:
        raise bad  # checked first: a reader that replaces the byte would change a question silently
    if builder == "json":
        check_json_file(p)
    import datasets

    datasets.disable_progress_bars()
    level = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its parse errors become our one line below
    try:
        ds = datasets.load_dataset(builder, data_files=str(p.resolve()), split="train", **kwargs)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file to fix
        cache = _cache_folder_error(e, p)
        if cache is not None:
            raise cache from None
        raise DataError(f"{p}: cannot read as {builder}: {_first_line(e)}") from None
    finally:
        datasets.logging.set_verbosity(level)
    rows = list(ds)
    if not rows:
        raise DataError(f"{p}: the file holds no rows")
    return rows


def _cache_folder_error(e: BaseException, data_file: Path) -> DataError | None:
    """When ``datasets`` failed on a folder of its own (its cache under an unwritable
    HOME, a full disk), not on the data file: the one line naming that folder."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.filename and Path(str(e.filename)).expanduser().resolve() != data_file.resolve():
            import errno

            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                return DataError(f"no space left on {e.filename} (the datasets cache, reading {data_file}); free some space and rerun")
            return DataError(
                f"cannot write the datasets cache folder {e.filename} ({e.strerror or e}) to read {data_file}: point HF_HOME "
                "(or HF_DATASETS_CACHE) at a writable folder, or HOME at one that can be created"
            )
        e = e.__cause__ or e.__context__
    return None


def _has_content(p: Path) -> bool:
    with p.open("rb") as f:
        for line in f:
            if line.strip():
                return True
    return False


def check_json_file(p: Path) -> None:
    """Read a JSON or JSON Lines file as :mod:`madara_cli.jsonl` reads a line, before
    ``datasets`` does: nesting too deep, an integer too long, an escape that is not
    Unicode text or a line that is not a JSON object is one DataError naming the line
    (``datasets`` would fail in a traceback of its own, or pass the bad string on)."""
    import json

    text = p.read_text(encoding=ENCODING)
    try:
        json.loads(text)
        whole = True
    except json.JSONDecodeError:
        whole = False
    except (RecursionError, ValueError):
        whole = text.lstrip().startswith("[")
    if whole:
        parse_line(text, p, 1)
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = parse_line(line, p, n)
        if not isinstance(obj, dict):
            raise DataError(f"{p}:{n}: not a JSON object (got {type(obj).__name__})")


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
