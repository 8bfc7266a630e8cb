"""``summary.csv`` (and ``summary.parquet`` with pyarrow): a row per finished cell (keys, ``route``
after ``strategy``, n, metrics, calls, tokens, seconds, health, settings, provenance last).

Rates are in percent as in every table (``em_pct``, ...; ``em_ci95_low_pct``/``_high_pct``:
the Wilson 95% interval of :mod:`madara_cli.core.stats`); metrics.json keeps fractions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from madara_cli.core import stats
from madara_cli.core.errors import RecordError
from madara_cli.results.outputs import METRICS, CellRecord
from madara_cli.results.record_files import CONFIG_FILE, METRICS_FILE, read_cell

SUMMARY_CSV = "summary.csv"
SUMMARY_PARQUET = "summary.parquet"

KEY_COLUMNS = ("grid", "model", "benchmark", "strategy", "retriever", "k", "seed", "limit", "key")
ROUTE_COLUMN = "route"
_NOT_METRICS = {"schema_version", "cell", "accounting", "health", "provenance", "timing", "n"}


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
        row: dict[str, Any] = {}
        for k in KEY_COLUMNS:
            row[k] = getattr(record, k)
            if k == "strategy":  # what a madara cell ran: the treatment its probe routed it to (empty for other strategies)
                row[ROUTE_COLUMN] = record.madara.get("route")
        row["n"] = record.n
        for k, v in record.to_dict().items():  # every numeric metric the cell reports, whatever its name
            if k in METRICS and _is_number(v):
                row[f"{k}_pct"] = 100.0 * v  # a rate, in percent as the tables show it
            elif k not in _NOT_METRICS and _is_number(v):
                row[k] = v
        iv = stats.rate_interval(record.em, record.n)
        if iv is not None:
            row["em_ci95_low_pct"], row["em_ci95_high_pct"] = 100.0 * iv.low, 100.0 * iv.high
        acc = record.accounting
        counts = request_counts(acc) or {}
        row.update(requests=counts.get("requests"), calls=acc.get("calls_issued"), cache_hits=acc.get("cache_hits"),
                   repeated_in_batch=counts.get("repeated"), tokens_in=acc.get("tokens_in"), tokens_out=acc.get("tokens_out"),
                   engine_seconds=record.engine_seconds)  # the timing section's (older records: the accounting's)
        row.update(health_columns(record))
        prov = record.provenance or {}
        row["seconds"] = record.seconds
        settings = cell_settings(record, metrics_path.parent)
        row["backend"] = settings.get("backend.name")
        row.update(served_columns(prov))
        row.update({k: v for k, v in settings.items() if k not in row})
        row.update(madara_version=prov.get("madara_version"), git_commit=prov.get("git_commit"), path=str(metrics_path.parent))
        rows.append(row)
    return rows


def request_counts(acc: Mapping[str, Any]) -> dict[str, int] | None:
    """``requests`` = ``sent`` + ``cached`` (from the response cache) + ``repeated`` (a duplicate in its
    batch, sent once: backends/cache.py); None for an accounting that counts nothing."""
    sent, cached = int(acc.get("calls_issued", 0) or 0), int(acc.get("cache_hits", 0) or 0)
    requests = acc.get("requests")
    if requests is None:  # a record written before requests were counted
        if "calls_issued" not in acc:
            return None
        requests = sent + cached
    return {"requests": int(requests), "sent": sent, "cached": cached, "repeated": max(int(requests) - sent - cached, 0)}


def health_columns(record: CellRecord) -> dict[str, Any]:
    """results/health.py's status, worst stage and score counts over all stages (empty when unknown)."""
    health = record.health
    over = health.over() if health.degraded else []
    known = health.status != "unknown"
    return {
        "health": health.status,
        "health_stage": over[0].stage if over else None,
        "scores": health.scores if known else None,
        "scores_imputed": health.imputed if known else None,
        "scores_cut_at_max_tokens": sum(s.cut_at_max_tokens for s in health.stages) if known else None,
        "scores_missing_id": sum(s.missing_id for s in health.stages) if known else None,
    }


def served_columns(prov: Mapping[str, Any]) -> dict[str, Any]:
    """A served engine's model id and software (two servers behind one ``model=`` differ); nothing for madara's own."""
    engine = prov.get("engine") if isinstance(prov, Mapping) else None
    server = engine.get("server") if isinstance(engine, Mapping) else None
    if not isinstance(server, Mapping):
        return {}
    software, version = server.get("software"), server.get("version")
    named = " ".join(str(x) for x in (software, version) if isinstance(x, str) and x)
    model_id = server.get("model_id")
    return {"served_model": model_id if isinstance(model_id, str) else None, "server": named or None}


def cell_settings(record: CellRecord, folder: Path) -> dict[str, Any]:
    """The flattened settings of a cell's key as recorded, else (older cells) from its config.yaml, without prompt digests."""
    stored = record.report.get("settings")
    if isinstance(stored, Mapping):
        return dict(stored)
    try:
        from madara_cli.config.keys import flat_settings
        from madara_cli.config.settings import as_settings
        from madara_cli.core.sidefiles import read_yaml_data

        # Plain data (no tags, no aliases): a results folder may come from anyone.
        return flat_settings(as_settings(read_yaml_data(folder / CONFIG_FILE, "the cell's config")))
    except Exception:  # an unreadable or foreign config.yaml: the row keeps its key columns
        return {}


def _numeric_column(values) -> bool:
    return all(v is None or _is_number(v) or (isinstance(v, float) and math.isnan(v)) for v in values)


def summary_frame(results_dir: Path | str):
    """One row per finished cell (:func:`cell_rows`), numeric columns as numbers, provenance last."""
    import pandas as pd

    rows = cell_rows(results_dir)
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=[*KEY_COLUMNS[:4], ROUTE_COLUMN, *KEY_COLUMNS[4:], "n"])
    tail = [c for c in ("madara_version", "git_commit", "path") if c in df.columns]
    df = df[[c for c in df.columns if c not in tail] + tail]
    for col in df.columns:  # numbers stay numbers (ints where every cell has one); text settings stay text
        if col not in ("key", "path", ROUTE_COLUMN) and _numeric_column(df[col].tolist()):
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


# --- one finished cell or probe as plain data: `madara ls cells` and the Python API's evaluate()


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * float(x), 3)


def _interval(iv) -> list[float] | None:
    return None if iv is None or iv.low is None else [_pct(iv.low), _pct(iv.high)]


def cell_result(record: CellRecord, folder: Path | None) -> dict[str, Any]:
    """A finished cell as plain data: EM and contains (percent) with Wilson intervals, F1 with
    :func:`~madara_cli.core.stats.mean_interval`'s (``folder`` None: none), health, route, requests, seconds."""
    from madara_cli.results.record_files import read_predictions

    try:
        f1s = [float(r["f1"]) for r in read_predictions(folder) if _is_number(r.get("f1"))] if folder is not None else []
    except (OSError, ValueError):
        f1s = []
    health = record.health
    return {
        "kind": "cell", "grid": record.grid, "model": record.model, "benchmark": record.benchmark, "strategy": record.strategy,
        "route": record.madara.get("route"), "n": record.n,
        "em": _pct(record.em), "em_ci95": _interval(stats.rate_interval(record.em, record.n)),
        "f1": _pct(record.f1), "f1_ci95": _interval(stats.mean_interval(f1s)) if f1s else None,
        "contains": _pct(record.contains), "contains_ci95": _interval(stats.rate_interval(record.contains, record.n)),
        "health": health.status, "health_reason": health.reason if health.degraded else "",
        **{k: v for k, v in (request_counts(record.accounting) or {}).items()},
        "wall_seconds": record.seconds, "engine_seconds": round(record.engine_seconds, 3), "key": record.key,
        "path": None if folder is None else str(folder),
    }


def probe_result(probe: Any) -> dict[str, Any]:
    """An RSC probe shaped as :func:`cell_result` (strategy ``rsc-probe``, EM its calibration NF EM)."""
    timing = probe.timing or {}
    wall = (probe.provenance or {}).get("seconds", timing.get("wall_seconds"))
    return {
        "kind": "probe", "grid": "probes", "model": probe.model, "benchmark": probe.benchmark, "strategy": "rsc-probe",
        "route": probe.route, "n": probe.n, "em": _pct(probe.em_nf), "em_ci95": _interval(stats.rate_interval(probe.em_nf, probe.n)),
        "f1": None, "f1_ci95": None, "contains": None, "contains_ci95": None, "health": None, "health_reason": "",
        **{k: v for k, v in (request_counts(probe.accounting or {}) or {}).items()},
        "wall_seconds": wall, "engine_seconds": float(timing.get("engine_seconds", 0) or 0), "key": probe.key,
        "path": str(probe.path.parent) if probe.path else None,
    }


def cells_table(rows: list[dict], status: list[str] | None = None, title: str | None = None) -> Any:
    """A rich leaderboard of :func:`cell_result` rows within 100 columns; ``status`` (the run
    table's) replaces the health column, and F1 its interval."""
    from rich.table import Table

    def interval(value, ci) -> str:
        return "—" if value is None else f"{value:.1f}" + (f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else "")

    t = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold", title=title, title_justify="left")
    for name in ("model", "benchmark", "strategy", "n", "EM % [95%]", "F1 %", "health" if status is None else "status", "calls", "time"):
        t.add_column(name, justify="right" if name in ("n", "calls", "time") else "left", overflow="fold")
    for i, r in enumerate(rows):
        strategy = r["strategy"] + (f" → {r['route']}" if r.get("route") else "")
        calls = "—" if r.get("requests") is None or not r["n"] else f"{r['requests'] / r['n']:.1f}"
        wall = r.get("wall_seconds")
        health = r.get("health") or "—" if status is None else status[i]
        t.add_row(r["model"], r["benchmark"], strategy, str(r["n"]), interval(r["em"], r["em_ci95"]),
                  interval(r["f1"], r["f1_ci95"] if status is None else None),
                  health, calls, "—" if not isinstance(wall, (int, float)) else f"{wall:.0f}s")
    return t
