"""How the ``madara`` entry point ends a command a user can fix or stop: the interrupt raised on
SIGINT/SIGTERM, the one line for an OS error, the override doing what another runner's option does."""

from __future__ import annotations

from madara_cli.core.errors import RESUME_HINT  # noqa: F401 - the CLI's lines read it from here


class Interrupted(BaseException):
    """SIGINT or SIGTERM during a command (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list[int] = []  # the signals received during this command, first first


def interrupt(signum, frame) -> None:
    """The SIGINT/SIGTERM handler: raise :class:`Interrupted`, remembering the signal (a library catching
    every exception, OmegaConf among them, may turn it into its own error, which must still end as it)."""
    _RECEIVED.append(signum)
    raise Interrupted(signum)


def forget_received() -> None:
    """A new command starts with no signal received (the entry point can run in-process more than once)."""
    _RECEIVED.clear()


def received() -> int | None:
    """The first SIGINT/SIGTERM received during this command, or None."""
    return _RECEIVED[0] if _RECEIVED else None


def os_error_line(e: OSError) -> str:
    import errno

    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        where = e.filename or "the device"
        return f"no space left on {where} ({e.strerror or e}); free some space and rerun"
    if e.filename:
        return f"cannot use {e.filename}: {e.strerror or e}"
    return str(e)


# Other evaluation runners' options (lm-evaluation-harness and friends) -> the override doing the same; a flag gets the value shown.
_OPTION_OVERRIDES = {
    "limit": "limit", "seed": "seed", "output_path": "results_dir", "output": "results_dir", "output_dir": "results_dir",
    "batch_size": "backend.batch_size", "log_samples": "log_samples", "model": "model", "tasks": "benchmark",
    "task": "benchmark", "benchmark": "benchmark", "strategy": "strategy", "device": "backend", "force": "force",
}
_FLAGS = {"log_samples": "true", "force": "true"}


def override_for_option(option: str, argv: list[str]) -> str | None:
    """``--limit 2`` -> ``limit=2`` (and the rest of the table above); None for an option with no counterpart."""
    name = option.lstrip("-").replace("-", "_")
    key = _OPTION_OVERRIDES.get(name)
    if key is None:
        return None
    value = _FLAGS.get(name)
    for i, arg in enumerate(argv):
        if arg == option and name not in _FLAGS and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    if key == "backend" and value is not None:
        from madara_cli.config import options

        if value not in options("backend"):
            return f"backend=NAME ({', '.join(options('backend'))})"
    return f"{key}={value if value is not None else '...'}"
