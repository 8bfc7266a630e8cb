"""The files of a cell and a probe: the only code that opens ``metrics.json``, ``probe.json``
or ``predictions.jsonl``.

A cell folder ``<grid>/<key>/`` holds ``config.yaml``, ``predictions.jsonl`` (a row per
query), ``prompts.jsonl`` (:mod:`.prompt_log`) and ``metrics.json`` (a ``CellRecord``),
renamed into place once complete; a probe folder ``probes/<key>/`` holds ``probe.json``
(a ``ProbeRecord``) and its ``prompts.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from madara_cli.core.credentials import redact
from madara_cli.core.errors import RecordError
from madara_cli.core.paths import writing
from madara_cli.results.outputs import CellRecord, ProbeRecord
from madara_cli.results.prompt_log import PROMPTS, write_prompts

METRICS_FILE = "metrics.json"
PROBE_FILE = "probe.json"
PREDICTIONS = "predictions.jsonl"
CONFIG_FILE = "config.yaml"
PROBES_GRID = "probes"


def is_finished_cell(folder: Path | str) -> bool:
    """A folder holding a metrics record is a finished cell (renamed into place only once complete)."""
    return (Path(folder) / METRICS_FILE).is_file()


def write_cell(folder: Path | str, record: CellRecord, config_yaml: str, predictions: Iterable[Mapping[str, Any]],
               samples: Mapping[str, tuple[str, str, Any, Any]] | None = None, render=None) -> Path:
    """Write a finished cell atomically: into ``.tmp-<key>-<pid>`` beside ``folder`` (metrics
    last), which then replaces ``folder``; a killed run leaves only the ``.tmp-*`` folder."""
    folder = Path(folder)
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with writing(tmp):
            tmp.mkdir(parents=True)
            (tmp / CONFIG_FILE).write_text(redact(config_yaml), encoding="utf-8")  # a URL's password is never kept
            with (tmp / PREDICTIONS).open("w", encoding="utf-8") as f:
                for r in predictions:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            if samples is not None:
                write_prompts(tmp, samples, render)
            (tmp / METRICS_FILE).write_text(record.to_json(), encoding="utf-8")
    except OSError:
        # A half-written copy cannot be resumed from (the cache can) and takes the space a rerun needs.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():  # --force: replace the old result only once the new one is complete
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


def _folders(root: Path, depth: int = 2) -> set[Path]:
    """The folders that exist now: ``root``, those above it, and those ``depth`` levels inside it."""
    base = Path(os.path.abspath(root))
    out = {p for p in (base, *base.parents) if p.is_dir()}
    level = [base]
    for _ in range(depth):
        level = [c for d in level if d.is_dir() for c in _subfolders(d)]
        out.update(level)
    return out


def _subfolders(d: Path) -> list[Path]:
    try:
        return [c for c in d.iterdir() if c.is_dir() and not c.is_symlink()]
    except OSError:
        return []


@contextmanager
def no_empty_folders_left(roots: Iterable[Path | str]) -> Iterator[None]:
    """On an error, remove the empty folders the block created under (or on the way to) ``roots``:
    a run that failed before its first cell leaves the disk as it found it."""
    before = {Path(r): _folders(Path(r)) for r in roots}
    try:
        yield
    except BaseException:
        for root, existed in before.items():
            for d in sorted(_folders(root) - existed, key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()  # only ever succeeds on an empty folder
                except OSError:
                    pass
        raise


def read_cell(folder: Path | str, grid: str | None = None) -> CellRecord | None:
    """A finished cell folder's record (None: not finished); a one-line RecordError when unreadable."""
    folder = Path(folder)
    path = folder / METRICS_FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RecordError(f"{path}: {e.strerror or e}") from None
    return CellRecord.from_json(text, grid=folder.parent.name if grid is None else grid, key=folder.name, path=path)


def read_config_text(folder: Path | str) -> str | None:
    """A cell's ``config.yaml`` as written; None when absent or not UTF-8 text."""
    try:
        return (Path(folder) / CONFIG_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@lru_cache(maxsize=256)
def _read_predictions(path: str, stamp: tuple[int, ...]) -> tuple[dict[str, Any], ...]:
    from madara_cli.core.sidefiles import json_problem, read_text

    rows = []
    for line_no, line in enumerate(read_text(path, "the predictions", ValueError).split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        row, problem = json_problem(line)  # a shared folder's file: nesting, huge integers, lone surrogates too
        if problem is not None:
            raise ValueError(f"{path}:{line_no}: {problem}")
        if isinstance(row, dict) and "em_squad" in row and "em_strict" not in row:
            # METRIC_VERSION 2 rows: em was strict, em_squad today's em (as outputs._metric_values reads a record).
            row = {**row, "em": row["em_squad"], "em_strict": row.get("em")}
            del row["em_squad"]
        rows.append(row)
    return tuple(rows)


def read_predictions(folder: Path | str) -> tuple[dict[str, Any], ...]:
    """A finished cell's rows, cached until its :func:`~madara_cli.core.sidefiles.file_stamp` changes
    (shared: do not edit them). A one-line ValueError when absent or a line is unreadable."""
    from madara_cli.core.sidefiles import file_stamp

    path = Path(folder) / PREDICTIONS
    if not path.is_file():
        raise ValueError(f"no {PREDICTIONS} in {folder}: is it a finished cell folder (results/<grid>/<cell>)?")
    return _read_predictions(str(path), file_stamp(path))


# --- a probe's file, and finding a record again ---------------------------------------------------


def probe_path(folder: Path | str) -> Path:
    return Path(folder) / PROBE_FILE


def write_probe(folder: Path | str, record: ProbeRecord) -> Path:
    """Write a probe record into ``folder`` (created), atomically; returns its path."""
    path = probe_path(folder)
    tmp = path.with_suffix(".tmp")
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(record.to_json(), encoding="utf-8")
        tmp.replace(path)
    return path


def read_probe(path: Path | str, require: tuple[str, ...] = ()) -> ProbeRecord | None:
    """A probe record from its folder or file (None: none); RecordError when unreadable or lacking a ``require``d field."""
    path = Path(path)
    if path.is_dir():
        path = probe_path(path)
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RecordError(f"{path} is not a readable {PROBE_FILE} ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RecordError(f"{path} is not a readable {PROBE_FILE} ({' '.join(str(e).split())})") from None
    record = ProbeRecord.from_dict(data if isinstance(data, dict) else {}, path)
    missing = record.missing(require) if isinstance(data, dict) else list(require)
    if missing:
        raise RecordError(f"{path} lacks {', '.join(missing)}; point it at a {PROBE_FILE} written by 'madara probe'")
    return record


def _record_folders(root: Path) -> list[Path]:
    return sorted({f.parent for pattern in (f"*/*/{METRICS_FILE}", f"{PROBES_GRID}/*/{PROBE_FILE}") for f in root.glob(pattern)
                   if not any(part.startswith(".") for part in f.relative_to(root).parts)})


def folder_problem(folder: Path | str) -> str | None:
    """Why ``folder`` (under ``<results>/<grid>/``, not hidden) is not a readable finished cell;
    None when it is one or holds no cell files (an index, say)."""
    folder = Path(folder)
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if METRICS_FILE not in names:
        found = sorted(names & {PREDICTIONS, CONFIG_FILE, PROMPTS})
        if not found:
            return None
        return (f"has {', '.join(found)} but no {METRICS_FILE}: a half-written or half-copied cell "
                "(madara writes a cell under .tmp-* and renames it only when complete)")
    try:
        if read_cell(folder) is None:
            return f"its {METRICS_FILE} is not a file"
    except RecordError as e:
        return record_problem(e, folder)
    return None


def record_problem(e: RecordError, folder: Path) -> str:
    """A :class:`RecordError` of ``folder``'s metrics.json, said relative to the folder."""
    text, path = str(e), str(Path(folder) / METRICS_FILE)
    return METRICS_FILE + text[len(path):] if text.startswith(path) else text


def find_cell(results_dir: Path | str, name: str) -> Path:
    """A cell or probe folder from a path, a key or a unique part of one; ValueError says what is wrong."""
    p = Path(name)
    if p.name in (METRICS_FILE, PROBE_FILE):  # the record's own file, as show prints a probe's
        p = p.parent
        name = str(p)
    if is_finished_cell(p) or probe_path(p).is_file():
        return p
    if p.is_dir() and (problem := folder_problem(p)):
        raise ValueError(f"{p} is not a finished cell ({problem}); rerun it with force=true, or delete it")
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"no results folder {root} (pass --results DIR, or a cell folder)")
    inside = root / name  # a path as printed under the results folder: probes/<key>, <grid>/<key>
    if name and not p.is_absolute() and (is_finished_cell(inside) or probe_path(inside).is_file()):
        return inside
    hits = _record_folders(root)
    exact = [h for h in hits if h.name == name]
    if exact:
        return exact[0]
    partial = [h for h in hits if name in h.name]
    if len(partial) == 1:
        return partial[0]
    if partial:
        raise ValueError(f"'{name}' matches {len(partial)} folders under {root}: " + ", ".join(h.name for h in partial[:5]) + (" ..." if len(partial) > 5 else ""))
    raise ValueError(f"no finished cell or probe '{name}' under {root} (pass a folder or a key; madara ls cells lists them)")


def read_record(folder: Path) -> tuple[str, CellRecord | ProbeRecord]:
    """The record of a cell or probe folder and the name of its file."""
    cell = read_cell(folder)
    if cell is not None:
        return METRICS_FILE, cell
    probe = read_probe(folder)
    if probe is not None:
        return PROBE_FILE, probe
    raise ValueError(f"{folder} has no {METRICS_FILE} or {PROBE_FILE}")


def flat_items(d: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """A record's nested sections as dotted ``(key, value)`` pairs (``madara show``)."""
    for k, v in d.items():
        if isinstance(v, Mapping):
            yield from flat_items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v
