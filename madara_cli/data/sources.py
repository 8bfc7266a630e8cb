"""Where a benchmark's rows come from: a local file or the Hugging Face hub, one code path.

Every loader reads its rows through :func:`read_rows`: from the hub
(``benchmark.hf_id``/``hf_config``/``split``) or, with ``benchmark.path=FILE``, from a local
JSON / JSONL / Parquet / CSV / TSV file in the same format (read once, without
``datasets``; it never touches the hub). An unreachable hub is one line, within seconds,
naming the dataset and the ``benchmark.path=`` override.
:func:`madara_cli.config.identity.source_identity` names the rows read (part of every
retrieval snapshot key).
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from madara_cli.config.settings import Settings
from madara_cli.core import hub
from madara_cli.core.errors import DataError
from madara_cli.core.hub import reachable as hub_reachable
from madara_cli.core.sidefiles import WHAT, decoded, open_local, parse_line, text_lines

log = logging.getLogger(__name__)


_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


def read_local(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a local JSON / JSONL / Parquet / CSV / TSV file in file order, read once however
    large (a 2 GB file was once read four times: UTF-8 check, JSON check, ``datasets``).
    JSON is parsed and checked here (:mod:`madara_cli.core.sidefiles`), a row missing a
    column gets it as null; CSV goes through pandas, Parquet through pyarrow."""
    p = Path(path).expanduser()
    builder = _FORMATS.get(p.suffix.lower())
    with open_local(p) as f:
        if builder is None:
            raise DataError(f"{p}: unsupported file type '{p.suffix}'; use .json, .jsonl, .parquet, .csv or .tsv")
        rows = _json_rows(f, p) if builder == "json" else _table_rows(f, p, builder)
    if not rows:
        raise DataError(f"{p}: the file holds no rows")
    return rows


def _json_rows(f: BinaryIO, p: Path) -> list[dict[str, Any]]:
    """One object a line, or one JSON value over the whole file (a list of objects, or one)."""
    lines = text_lines(f, p, WHAT)
    rows: list[dict[str, Any]] = []
    blank = True
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if blank and not _one_line_value(line):
            whole = parse_line(line + "".join(lines), p, n)
            rows, blank = (whole if isinstance(whole, list) else [whole]), False
            for i, row in enumerate(rows, 1):
                if not isinstance(row, dict):
                    raise DataError(f"{p}: item {i} is not a JSON object (got {type(row).__name__})")
            break
        row = parse_line(line, p, n)
        if not isinstance(row, dict):
            raise DataError(f"{p}:{n}: not a JSON object (got {type(row).__name__})")
        rows.append(row)
        blank = False
    if blank and not rows:
        raise DataError(f"{p}: the file is empty (no rows)")
    columns = dict.fromkeys(k for row in rows for k in row)
    return rows if all(len(row) == len(columns) for row in rows) else [{k: row.get(k) for k in columns} for row in rows]


def _one_line_value(line: str) -> bool:
    """Whether a first line is a whole JSON value (JSON Lines), not the start of one."""
    if line.lstrip().startswith("["):
        return False
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _table_rows(f: BinaryIO, p: Path, builder: str) -> list[dict[str, Any]]:
    import pyarrow as pa

    try:
        if builder == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(f)
        else:
            import pandas as pd

            text = decoded(f.read(), p, WHAT)
            if not text.strip():
                raise DataError(f"{p}: the file is empty (no rows)")
            table = pa.Table.from_pandas(pd.read_csv(io.StringIO(text), sep="\t" if p.suffix.lower() == ".tsv" else ","), preserve_index=False)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file to fix
        raise DataError(f"{p}: cannot read as {builder}: {hub.first_line(e)}") from None
    return table.to_pylist()


def unreachable(hf_id: str) -> DataError:
    return DataError(f"cannot reach the Hugging Face hub for {hf_id} and it is not in the local datasets cache; download it elsewhere "
                     "and pass benchmark.path=FILE (a warm cache is read offline by itself; HF_HUB_OFFLINE=1 skips the hub check)")


@contextmanager
def offline_mode() -> Iterator[None]:
    """Offline for the block: ``datasets`` and ``huggingface_hub`` read ``HF_HUB_OFFLINE`` once, at
    import, so the variables and the libraries' copies of them are set, then restored."""
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
    """Rows of a hub dataset (or of one raw file in a hub repo, ``data_files=hf://...``), at
    ``revision`` when given. A 3-second probe first fails fast where ``datasets`` would
    retry for ~25 s; without the hub a warm local cache is read offline;
    ``HF_HUB_OFFLINE=1`` skips the probe."""
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
        raise DataError(f"cannot load {hf_id} (config {config}, split {split}{f', revision {revision}' if revision else ''}) from the "
                        f"Hugging Face hub: {hub.first_line(e)}; download it elsewhere and pass benchmark.path=FILE") from None
    return list(ds)


def read_rows(cfg: Settings, data_files: str | None = None) -> list[dict[str, Any]]:
    """The benchmark's rows: ``benchmark.path`` when set, else the hub."""
    if cfg.get("path"):
        return read_local(cfg.path)
    if not cfg.get("hf_id"):
        raise DataError(f"benchmark {cfg.name} has no hub source; pass benchmark.path=FILE")
    return read_hub(cfg.hf_id, cfg.get("hf_config"), cfg.get("split") or "test", data_files=data_files, revision=cfg.get("revision"))
