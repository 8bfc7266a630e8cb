"""Logging: ``-v``/``--verbose`` turns on rich log lines on stderr; without it only warnings, but
:mod:`madara_cli.core.progress`'s INFO step lines still show on a non-terminal (CI, SLURM, ``| tee``).
"""

from __future__ import annotations

import logging

from rich.console import Console
from rich.logging import RichHandler

_CONFIGURED = False
LOGGERS = ("madara_cli", "madara")  # madara.retrieval and friends log under the short name


class _PlainHandler(logging.StreamHandler):
    """Plain lines to the console's file as it is per record (pytest replaces stderr after setup)."""

    def __init__(self, console: Console):
        super().__init__(console.file)
        self._console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self._console.file
        super().emit(record)


class _Printable(logging.Formatter):
    """A log line with control characters escaped, newlines kept (it may quote a foreign file:
    :func:`madara_cli.core.sidefiles.printable`), and no URL's password (:func:`madara_cli.core.credentials.redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        from madara_cli.core.credentials import redact
        from madara_cli.core.sidefiles import printable

        return printable(redact(super().format(record)), keep_newlines=True)


def setup_logging(verbose: int = 0, console: Console | None = None) -> None:
    """Configure the ``madara_cli`` loggers once: WARNING, or INFO with ``-v``, DEBUG with ``-vv``.
    ``madara_cli.core.progress`` always logs at INFO (it is the run's heartbeat on a non-terminal)."""
    global _CONFIGURED
    level = logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING
    roots = [logging.getLogger(name) for name in LOGGERS]
    if not _CONFIGURED:
        console = console or Console(stderr=True)
        handler: logging.Handler
        if console.is_terminal:
            handler = RichHandler(console=console, show_path=verbose >= 2, rich_tracebacks=False, markup=False,
                                  show_time=True, omit_repeated_times=False, log_time_format="%H:%M:%S")
            handler.setFormatter(_Printable("%(message)s"))
        else:
            # a log file, CI or `| tee`: whole lines for grep, never wrapped at rich's assumed 80 columns
            handler = _PlainHandler(console)
            handler.setFormatter(_Printable("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
        for root in roots:
            root.addHandler(handler)
            root.propagate = False
        _CONFIGURED = True
    for root in roots:
        root.setLevel(level)
    logging.getLogger("madara_cli.core.progress").setLevel(min(level, logging.INFO))
