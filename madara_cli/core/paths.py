"""Where madara meets the file system: folder and file names built from user values
(grid, model, benchmark, strategy and retriever names) stay inside the results
folder, an OSError names the file it happened on, and a text file that is not UTF-8
is reported with the byte where it stops being so.

Names are refused, not rewritten: a sanitised ``../x`` would have to become some other
name, and two different names could then share one folder. :func:`check_name` is what
composition calls; :func:`inside` is the last guard before a write, for any path
built from those names."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The one naming rule, for every name that becomes a folder, a file or a tracking tag
# (benchmark, model, strategy and retriever labels, grid, prompt set, run names): ASCII
# letters, digits, '-', '_' and '.', not starting with '.' (hidden names are the store's
# own: .tmp-* folders being written, .hydra job folders), at most NAME_MAX_BYTES long.
#
# The bound keeps the longest file name madara writes under the 255 bytes a file system
# allows per component. That is a cell being written, ``.tmp-<cell key>-<pid>``, whose
# key is ``<model>__<benchmark>__<strategy>__<retriever>-k<k>__n<limit>__s<seed>__<hash8>``:
# 4 names + 12 ("__" six times) + 2+5 ("-k", k <= 10,000) + 1+10 ("n", limit <= 10^9)
# + 1+10 ("s", seed < 2^32) + 8 (hash) + 5+1+7 (".tmp-", "-", a pid <= 4,194,304)
# = 4 names + 62 <= 255, so each name may take 48 bytes (a snapshot's
# ``<benchmark>__<retriever>-k<k>__<hash16>.meta.<pid>.tmp`` and a probe's
# ``<model>__<benchmark>__n<n>__<hash>`` are shorter).
NAME_MAX_BYTES = 48
NAME_CHARS = "letters, digits, '-', '_' and '.'"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be a name (see the rule above), or None if it can."""
    text = str(value)
    if not text.strip():
        return "it is empty"
    if not _NAME.fullmatch(text):
        bad = next(c for c in text if not _NAME.fullmatch(c))
        return f"it holds {bad!a}"
    if text.startswith("."):
        return "it starts with '.' (hidden and relative names are the store's own)"
    if len(text) > NAME_MAX_BYTES:
        return f"it is {len(text)} characters long, over {NAME_MAX_BYTES} (the results folder's file names must stay under 255 bytes)"
    return None


def check_name(key: str, value: object, error: type[Exception]) -> None:
    """Raise ``error`` (one line) when setting ``key``'s value breaks the naming rule."""
    problem = name_problem(value)
    if problem:
        raise error(f"{key}={str(value)!a} cannot name a results folder: {problem}; use {NAME_CHARS} (at most {NAME_MAX_BYTES})")


def inside(root: str | Path, path: str | Path) -> Path:
    """``path``, after making sure it lies inside ``root``. Judged on the names alone
    (``..`` folded, links not followed): a results subfolder that the user linked to
    another disk on purpose stays usable."""
    base, target = os.path.abspath(root), os.path.abspath(path)
    if target != base and not target.startswith(base if base.endswith(os.sep) else base + os.sep):  # a parent of target, by whole names
        raise PermissionError(f"{path} would be written outside the results folder {root}; refusing")
    return Path(path)


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Put ``path`` into an OSError raised without a file name (``write()`` on a full
    disk names none), so the one line the CLI prints says where it happened."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from None
        raise


def cache_root() -> Path:
    """madara's per-machine cache (compiled wheels, model folders made from GGUF files,
    file digests): ``$MADARA_CACHE``, else ``~/.cache/madara``."""
    return Path(os.environ.get("MADARA_CACHE") or Path.home() / ".cache" / "madara")
