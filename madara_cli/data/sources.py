"""Where a benchmark's rows come from: a local file or the Hugging Face hub, one code path.

Every loader (:mod:`madara_cli.data.loaders.benchmarks`, plug-ins) reads its rows through
:func:`read_rows`, so a benchmark comes either from the hub
(``benchmark.hf_id``/``hf_config``/``split``) or, with ``benchmark.path=FILE``, from a
local JSON / JSONL / Parquet / CSV / TSV file in the same format, through the same
code (``datasets.load_dataset("json", data_files=FILE)``). A local file never touches
the hub. When the hub cannot be reached the error is one line naming the dataset and
the ``benchmark.path=`` override, within seconds. :func:`madara_cli.config.identity.source_identity` names the
rows read (part of every retrieval snapshot key).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from madara_cli.core import hub
from madara_cli.core.errors import DataError
from madara_cli.core.hub import reachable as hub_reachable
from madara_cli.core.paths import not_utf8
from madara_cli.core.sidefiles import ENCODING, parse_line

log = logging.getLogger(__name__)


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
        raise DataError(f"{p}: cannot read as {builder}: {hub.first_line(e)}") from None
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
    """Read a JSON or JSON Lines file as :mod:`madara_cli.core.sidefiles` reads a line, before
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
    if not hub.offline_requested() and not hub_reachable():
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
        if hub.connectivity_error(e):
            raise unreachable(hf_id) from None
        raise DataError(
            f"cannot load {hf_id} (config {config}, split {split}{f', revision {revision}' if revision else ''}) from the Hugging Face hub: "
            f"{hub.first_line(e)}; download it elsewhere and pass benchmark.path=FILE"
        ) from None
    return list(ds)


def read_rows(cfg: DictConfig, data_files: str | None = None) -> list[dict[str, Any]]:
    """The benchmark's rows: ``benchmark.path`` when set, else the hub."""
    if cfg.get("path"):
        return read_local(cfg.path)
    if not cfg.get("hf_id"):
        raise DataError(f"benchmark {cfg.name} has no hub source; pass benchmark.path=FILE")
    return read_hub(cfg.hf_id, cfg.get("hf_config"), cfg.get("split") or "test", data_files=data_files, revision=cfg.get("revision"))
