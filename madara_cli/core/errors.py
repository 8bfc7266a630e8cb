"""The errors a user can cause, in one place. The CLI prints each as one line and exits
non-zero (2 for a setting or data a user can fix); none of them ends in a traceback.

- :class:`ConfigError` — a bad override or config (:class:`TrackingError`: the tracker
  that the config asks for cannot be used).
- :class:`DataError` — missing or unreadable benchmark data (:class:`SnapshotError`: a
  retrieval snapshot edited after it was written; :class:`RecordError`: a results file
  that cannot be read as its record; :class:`DegradedCell`: a cell that rests on too
  many imputed scores, refused under ``health.on_degraded=fail``).
- :class:`BackendError` — an engine that cannot run (missing engine, unreachable server,
  bad model path; :class:`CacheError`: a response cache that cannot be used).

They live below every other module, so the code that raises them and the CLI that
reports them import them from here without pulling in the module that first met them.
"""

from __future__ import annotations

# What a run that stops part-way keeps, and how it goes on: the interrupt's line and a
# served engine that went away mid-run end with it.
RESUME_HINT = "finished cells and cached completions are kept; rerun the same command to resume"


class ConfigError(ValueError):
    """A bad override or config a user can fix; printed as one line, exit 2."""


class TrackingError(ConfigError):
    """The tracker cannot be used (extra not installed, unreachable store); printed as
    one line like any setting a user can fix."""


class DataError(ValueError):
    """Missing or unreadable benchmark data; printed as one line, exit 2."""


class SnapshotError(DataError):
    """A snapshot line that does not match its content hash (printed as one line)."""


class RecordError(DataError):
    """A results file that cannot be read as its record (printed as one line)."""


class DegradedCell(DataError):
    """A cell whose scores are past the health threshold under
    ``health.on_degraded=fail``: nothing of it is written (printed as one line)."""


class PluginInterrupted(BaseException):
    """A KeyboardInterrupt while a plug-in imported: one line naming it, exit 130 (a
    BaseException, like the interrupt it stands for, so no ``except Exception`` eats it)."""


class BackendError(RuntimeError):
    """A failure a user can act on (missing engine, unreachable server, bad model path).
    The CLI prints its message as one line and exits non-zero."""


class CacheError(BackendError):
    """The response cache cannot be used (damaged file, not a database, no access);
    printed as one line naming the file and what to do."""


def import_failure(what: str, e: BaseException, install: str) -> str:
    """The one line for ``what`` when a package it needs cannot be imported: not installed
    (``install`` says how to get it), or installed and broken, typically a CUDA build of
    torch on a machine without the CUDA libraries (it said only "libcudart.so.12: cannot
    open shared object file")."""
    text = str(e)
    broken = isinstance(e, OSError) or any(m in text for m in (".so", "shared object", "DLL", "undefined symbol"))
    if isinstance(e, ImportError) and not broken:
        return f"{what} needs {install}"
    why = " ".join(str(e).split())[:200]
    return (f"{what}: an installed package cannot be loaded ({why}): it was built for another machine, usually torch for CUDA "
            f"libraries this one lacks; reinstall it for this machine (torch's CPU build: pip install --force-reinstall torch "
            f"--index-url https://download.pytorch.org/whl/cpu)")


__all__ = ["RESUME_HINT", "import_failure", "BackendError", "CacheError", "ConfigError", "DataError", "DegradedCell", "PluginInterrupted", "RecordError", "SnapshotError", "TrackingError"]
