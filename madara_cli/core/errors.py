"""The errors a user can cause: the CLI prints each as one line, no traceback, and exits non-zero
(2 for a setting or data a user can fix). Below every other module, so raisers and the CLI
import them without the module that first met them.
"""

from __future__ import annotations

# what a run stopped part-way keeps and how it goes on (ends the interrupt's line and a lost served engine's)
RESUME_HINT = "finished cells and cached completions are kept; rerun the same command to resume"


class ConfigError(ValueError):
    """A bad override or config a user can fix; printed as one line, exit 2."""


class TrackingError(ConfigError):
    """The tracker cannot be used (extra not installed, unreachable store); one line."""


class DataError(ValueError):
    """Missing or unreadable benchmark data; printed as one line, exit 2."""


class SnapshotError(DataError):
    """A retrieval snapshot line that does not match its content hash (edited after writing)."""


class RecordError(DataError):
    """A results file that cannot be read as its record (printed as one line)."""


class DegradedCell(DataError):
    """A cell past the imputed-score health threshold under ``health.on_degraded=fail``: nothing of it is written."""


class PluginInterrupted(BaseException):
    """A KeyboardInterrupt while a plug-in imported: one line, exit 130 (a BaseException, so no ``except Exception`` eats it)."""


class BackendError(RuntimeError):
    """An engine that cannot run (missing engine, unreachable server, bad model path); one line, non-zero exit."""


class CacheError(BackendError):
    """The response cache cannot be used (damaged, not a database, no access); one line naming the file and what to do."""


def import_failure(what: str, e: BaseException, install: str) -> str:
    """The one line for ``what`` when a package it needs cannot be imported: not installed (``install``
    says how), or broken, typically CUDA torch without CUDA libraries ("libcudart.so.12: cannot open shared object file")."""
    text = str(e)
    broken = isinstance(e, OSError) or any(m in text for m in (".so", "shared object", "DLL", "undefined symbol"))
    if isinstance(e, ImportError) and not broken:
        return f"{what} needs {install}"
    why = " ".join(str(e).split())[:200]
    return (f"{what}: an installed package cannot be loaded ({why}): it was built for another machine, usually torch for CUDA "
            f"libraries this one lacks; reinstall it for this machine (torch's CPU build: pip install --force-reinstall torch "
            f"--index-url https://download.pytorch.org/whl/cpu)")


__all__ = ["RESUME_HINT", "import_failure", "BackendError", "CacheError", "ConfigError", "DataError", "DegradedCell", "PluginInterrupted", "RecordError", "SnapshotError", "TrackingError"]
