"""What ``madara plan`` prints: a table whole at 100 columns (and piped), the calibration each
engine's time rests on, and the same numbers as JSON (``--json``) or CSV (``--csv``)."""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from typing import Any

from rich import box
from rich.table import Table

from madara_cli.experiment.plan_counts import Plan, StrategyPlan, format_per_query, paper_calls_per_query

TABLE_WIDTH = 100  # the table's widest rendering: whole at 100 columns, piped or not

# One row's fields in --json and --csv, in order.
FIELDS = ("strategy", "cells", "finished_cells", "estimated_cells", "requests", "probe_requests", "scoring_per_query",
          "other_per_query", "table18_per_query", "calls", "cached", "uncached", "prompt_tokens", "output_tokens_max",
          "est_seconds", "est_timed_calls", "measured_cells", "measured_requests", "measured_calls", "measured_seconds",
          "measured_wall_seconds")


def _duration(seconds: float) -> str:
    from madara_cli.core.progress import _duration as duration

    return duration(seconds)


def compact(n: float) -> str:
    """A count in at most 7 characters: ``999,999``, then ``1.23M``, ``12.3M``, ``123M``, ``1.23G``."""
    n = round(n)
    if abs(n) < 1_000_000:
        return f"{n:,}"
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g}{unit}" if v < 1000 else f"{v:,.0f}{unit}"
    return f"{n:,}"


def est_time(s: StrategyPlan) -> str:
    """A row's engine time: "0s" all cached, "—" uncalibrated, "≥" when only some uncached calls are calibrated."""
    if s.uncached <= 0:
        return "0s"
    if not s.timed_calls:
        return "—"
    return ("" if s.fully_timed else "≥ ") + _duration(s.seconds)


def rows(p: Plan) -> list[dict[str, Any]]:
    """Each strategy's numbers and the total, in full (what --json and --csv hold)."""
    out = []
    for name, s in [*p.by_strategy.items(), ("total", p.total())]:
        pq = None if name == "total" else s.per_query()
        out.append({
            "strategy": name, "cells": s.cells, "finished_cells": s.finished_cells, "estimated_cells": s.estimated_cells,
            "requests": s.requests, "probe_requests": s.probe_requests,
            "scoring_per_query": None if pq is None else round(pq[0], 3), "other_per_query": None if pq is None else round(pq[1], 3),
            "table18_per_query": None if name == "total" else paper_calls_per_query(name),
            "calls": s.calls, "cached": s.cached, "uncached": s.uncached, "prompt_tokens": s.prompt_tokens,
            "output_tokens_max": s.output_tokens,
            "est_seconds": round(s.seconds, 3) if s.timed_calls or s.uncached == 0 else None,
            "est_timed_calls": round(s.timed_calls), "measured_cells": s.measured_cells,
            "measured_requests": s.measured_requests, "measured_calls": s.measured_calls, "measured_seconds": round(s.measured_seconds, 3),
            "measured_wall_seconds": round(s.measured_wall_seconds, 3),
        })
    return out


def table(p: Plan, title: str) -> Table:
    """A row per strategy and the total, numbers in at most 7 characters: whole at :data:`TABLE_WIDTH` columns."""
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), collapse_padding=True, pad_edge=False, title_justify="left")
    names = [*p.by_strategy, "total"]
    t.add_column("strategy", no_wrap=True, min_width=max(len(n) for n in names))
    for col in ("cells", "requests", "/query", "Table 18", "calls", "cached", "prompt", "output ≤", "est. time"):
        # Table 18's notes wrap at their spaces; a number is never cut (at most 7 characters each)
        t.add_column(col, justify="left" if col == "Table 18" else "right", overflow="fold", max_width=11 if col == "Table 18" else None)
    for name, s in [*p.by_strategy.items(), ("total", p.total())]:
        cells = compact(s.cells)
        if s.finished_cells:
            cells += f" ({compact(s.finished_cells)}✓)"
        if s.estimated_cells:
            cells += f" ({compact(s.estimated_cells)}~)"
        per_query, paper = ("", "") if name == "total" else (format_per_query(s), paper_calls_per_query(name))
        t.add_row(name, cells, compact(s.requests), per_query, paper, compact(s.calls), compact(s.cached), compact(s.prompt_tokens),
                  compact(s.output_tokens), est_time(s), end_section=name == list(p.by_strategy)[-1])
    return t


def finished_table(p: Plan) -> Table | None:
    """What the cells finished already measured, per strategy (None when none is)."""
    done = [(n, s) for n, s in p.by_strategy.items() if s.measured_cells]
    if not done:
        return None
    t = Table(title="finished cells, as measured", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), collapse_padding=True, pad_edge=False,
              title_justify="left")
    for col in ("strategy", "cells", "requests", "calls", "engine time", "wall time"):
        t.add_column(col, justify="left" if col == "strategy" else "right", overflow="fold")
    for name, s in done:
        t.add_row(name, compact(s.measured_cells), compact(s.measured_requests), compact(s.measured_calls), _duration(s.measured_seconds),
                  _duration(s.measured_wall_seconds))
    return t


LEGEND = (
    "cells: (N✓) finished already, they cost nothing more; (N~) their data is not here, counted on placeholder queries. "
    "calls: the engine calls the cells need, work shared through the response cache counted once; cached: of those, in the "
    "cache already. prompt: prompt tokens ≈ characters / 4; output ≤: the uncached calls' max_tokens (a score request reads "
    "one token). /query: a strategy's own scoring + other requests per query, beside Table 18's note on LLM calls per query. "
    "est. time: the uncached calls, each priced by its prompt tokens and its expected output at the engine's calibration below "
    "(— without one; ≥ when only some calls have one)."
)


def notes(p: Plan) -> list[str]:
    """The lines under the table: the calibration of every engine, then the plan's notes."""
    out = []
    probe = p.total().probe_requests
    if probe:
        out.append(f"requests include {probe:,} of madara's one-time RSC probe on the calibration split")
    if p.total().estimated_cells:
        out.append(f"{p.total().estimated_cells} cell(s) are estimates: their data is not here yet, so they were counted "
                   "on placeholder queries (limit, else benchmark.sample capped at the known size, k passages each)")
    out.extend(f"est. time, {c.describe()}" for c in p.calibrations)
    out.extend(p.notes)
    return out


def to_json(p: Plan, title: str) -> dict[str, Any]:
    all_rows = rows(p)
    return {
        "plan": title, "grid": p.grid, "cells": len(p.cells), "strategies": all_rows[:-1], "total": all_rows[-1],
        "calibrations": [c.to_dict() for c in p.calibrations], "notes": notes(p),
    }


def to_csv(p: Plan) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows(p):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def show(p: Plan, title: str, fmt: str, console) -> None:
    """Print the plan as ``fmt`` (table | json | csv) on stdout."""
    if fmt == "json":
        sys.stdout.write(json.dumps(to_json(p, title), indent=2, ensure_ascii=False) + "\n")
        return
    if fmt == "csv":
        sys.stdout.write(to_csv(p))
        return
    width = min(console.width, TABLE_WIDTH)
    console.print(table(p, title), width=width)
    done = finished_table(p)
    if done is not None:
        console.print(done, width=width)
    console.print(LEGEND, style="dim", width=width)
    for line in notes(p):
        console.print(line, style="dim", highlight=False, width=width)


class Heartbeat:
    """A ``(done, total)`` callback over many cells: nothing within :attr:`after` seconds; then a bar on a terminal,
    elsewhere (CI, a pipe) a stderr line every tenth of the work or 30 s, with cells/s and time left."""

    def __init__(self, label: str, console, after: float = 5.0):
        self.label, self.after, self.console = label, after, console
        self._t0 = time.monotonic()
        self._bar = None
        self._last: tuple[float, int] | None = None  # (time, done) of the last line written

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        elapsed = now - self._t0
        if self._bar is None and self._last is None:
            if elapsed < self.after or done >= total:
                return
            if self.console.is_terminal:
                from madara_cli.core.progress import StageProgress

                self._bar = StageProgress(self.console, log_lines=False, unit="cells")
                self._bar.__enter__()
        if self._bar is not None:
            self._bar(self.label, done, total)
            return
        if self._last is not None and done < total and done - self._last[1] < max(1, total // 10) and now - self._last[0] < 30:
            return
        self._last = (now, done)
        rate = done / elapsed if elapsed > 0 else 0.0
        left = f"ETA {_duration((total - done) / rate)}" if rate > 0 and done < total else f"done in {_duration(elapsed)}"
        self.console.print(f"{self.label}: {done:,}/{total:,} cells, {rate:,.1f} cells/s, {left}", highlight=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None
