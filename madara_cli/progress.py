"""Rich progress for long stages: calls done/total, calls/s and ETA per stage."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class StageProgress:
    """A ``ProgressFn`` (stage, done, total) backed by one rich bar per stage.
    Silent when stderr is not a terminal unless ``force``."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.speed:>5.1f} calls/s" if False else "{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._tasks: dict[str, int] = {}
        self.label = ""

    def __enter__(self) -> "StageProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        name = f"{self.label} {stage}".strip()
        if name not in self._tasks or done == 0:
            if name in self._tasks:
                self._progress.remove_task(self._tasks[name])
            self._tasks[name] = self._progress.add_task(name, total=total, rate="")
        tid = self._tasks[name]
        self._progress.update(tid, completed=done, total=total)
        task = self._progress.tasks[[t.id for t in self._progress.tasks].index(tid)]
        speed = task.speed
        self._progress.update(tid, rate=f"{speed:.1f} calls/s" if speed else "")
