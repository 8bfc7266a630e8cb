"""Progress for long stages (done/total, rate, ETA): a rich bar per stage (and a grid's cells) on
a terminal; elsewhere (CI, SLURM, ``| tee``) INFO lines at each stage's start, every tenth or 30
s, and end, and per grid cell with the rest's ETA. Counts move per completion (llama.cpp,
OpenAI-compatible servers) or per batch (vLLM).
"""

from __future__ import annotations

import logging
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

log = logging.getLogger("madara_cli.core.progress")

LOG_EVERY_S = 30.0
LOG_EVERY_FRACTION = 0.1


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class StageProgress:
    """A ``ProgressFn`` (stage, done, total): rich bars on a terminal, log lines elsewhere
    (``log_lines`` forces either)."""

    def __init__(self, console: Console | None = None, log_lines: bool | None = None, unit: str = "calls"):
        self.unit = unit  # what is counted: calls (a stage's), cells (madara plan's walk)
        self.console = console or Console(stderr=True, markup=False)
        self.log_lines = (not self.console.is_terminal) if log_lines is None else log_lines
        self._progress = Progress(
            TextColumn("{task.description}", style="bold", markup=False),  # a label from data, never markup
            BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=self.console, transient=True,
        )
        self._tasks: dict[str, int] = {}
        self._started: dict[str, tuple[float, float, int]] = {}  # name -> (start, last log time, last logged done)
        self.label = ""

    def __enter__(self) -> "StageProgress":
        if not self.log_lines:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.log_lines:
            self._progress.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        name = f"{self.label} {stage}".strip()
        if self.log_lines:
            self._log(name, done, total)
            return
        if name not in self._tasks or done == 0:
            if name in self._tasks:
                self._progress.remove_task(self._tasks[name])
            self._tasks[name] = self._progress.add_task(name, total=total, rate="")
        tid = self._tasks[name]
        self._progress.update(tid, completed=done, total=total)
        task = self._progress.tasks[[t.id for t in self._progress.tasks].index(tid)]
        speed = task.speed
        self._progress.update(tid, rate=f"{speed:.1f} {self.unit}/s" if speed else "")

    def cells(self, done: int, total: int, eta_s: float | None = None) -> None:
        """A grid's cells done of ``total`` and the ETA (None until a cell ran; finished ones read back at once)."""
        eta = "" if eta_s is None else f"ETA {_duration(eta_s)}" if done < total else "done"
        if self.log_lines:
            log.info("grid: %d/%d cells%s", done, total, f", {eta}" if eta else "")
            return
        if "\0grid" not in self._tasks:
            self._tasks["\0grid"] = self._progress.add_task("cells", total=total, rate="")
        self._progress.update(self._tasks["\0grid"], completed=done, total=total, rate=eta)

    def _log(self, name: str, done: int, total: int, now: float | None = None) -> None:
        """One line: stage, done/total, rate, ETA; throttled to every tenth or 30 s."""
        now = time.monotonic() if now is None else now
        if name not in self._started or done == 0:
            self._started[name] = (now, now, 0)
            log.info("%s: 0/%d %s", name, total, self.unit)
            return
        start, last_t, last_done = self._started[name]
        step = max(1, int(total * LOG_EVERY_FRACTION))
        if done < total and done - last_done < step and now - last_t < LOG_EVERY_S:
            return
        self._started[name] = (start, now, done)
        elapsed = max(now - start, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else float("inf")
        log.info("%s: %d/%d %s, %.2f %s/s, %s", name, done, total, self.unit, rate, self.unit,
                 f"done in {_duration(elapsed)}" if done >= total else f"ETA {_duration(eta)}")


class PlainBar:
    """One plain text bar per stage redrawn by carriage return, for a notebook (rich's live bars
    need a terminal) or any stream; the same call, ``cells`` and ``label`` as :class:`StageProgress`."""

    WIDTH = 24
    EVERY_S = 0.25  # redraws at most this often, and always at a stage's end

    def __init__(self, stream=None, unit: str = "calls"):
        import sys

        self.stream = stream if stream is not None else sys.stdout
        self.unit = unit
        self.label = ""
        self._name, self._start, self._drawn = "", 0.0, 0.0

    def __enter__(self) -> "PlainBar":
        return self

    def __exit__(self, *exc) -> None:
        if self._name:
            self.stream.write("\n")
            self.stream.flush()
            self._name = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        name, now = f"{self.label} {stage}".strip(), time.monotonic()
        if name != self._name or done == 0:
            if self._name and name != self._name:
                self.stream.write("\n")
            self._name, self._start, self._drawn = name, now, 0.0
        if done < total and now - self._drawn < self.EVERY_S:
            return
        self._drawn = now
        filled = self.WIDTH if not total else int(self.WIDTH * done / total)
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        tail = f"done in {_duration(elapsed)}" if done >= total else f"ETA {_duration((total - done) / rate)}" if rate > 0 else ""
        self.stream.write(f"\r{name} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} {self.unit} {tail}")
        self.stream.flush()

    def cells(self, done: int, total: int, eta_s: float | None = None) -> None:
        self("cells", done, total)


def auto_progress():
    """Progress for the Python API: :class:`PlainBar` on stdout in a notebook (an IPython
    kernel shows it under the cell), rich bars on a terminal, else a plain bar on stderr: a
    script's stdout holds only what the script prints."""
    import sys

    if "ipykernel" in sys.modules:
        return PlainBar(sys.stdout)
    if sys.stderr.isatty():
        return StageProgress(Console(stderr=True, markup=False))
    return PlainBar(sys.stderr)
