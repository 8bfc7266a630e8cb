"""Where madara meets the file system: names from user values stay inside the results folder
(:func:`check_name` at composition, :func:`inside` before a write), and an OSError names its
file. Names are refused, never rewritten (a sanitised ``../x`` could share another's folder)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The one naming rule for every name that becomes a folder, file or tracking tag: ASCII letters,
# digits, '-', '_', '.', not starting with '.' (the store's own: .tmp-* folders, .hydra), at most
# NAME_MAX_BYTES. The longest file name written, ``.tmp-<model>__<benchmark>__<strategy>__
# <retriever>-k<k>__n<limit>__s<seed>__<hash8>-<pid>``, is 4 names + 12 ("__" x6) + 2+5 (k <=
# 10,000) + 1+10 (limit <= 10^9) + 1+10 (seed < 2^32) + 8 + 5+1+7 (pid <= 4,194,304) = 4 names
# + 62 <= 255 bytes, so 48 each (snapshot and probe names are shorter).
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
    """``path``, checked to lie inside ``root`` by names alone (``..`` folded, links not followed:
    a subfolder linked to another disk on purpose stays usable)."""
    base, target = os.path.abspath(root), os.path.abspath(path)
    if target != base and not target.startswith(base if base.endswith(os.sep) else base + os.sep):  # a parent of target, by whole names
        raise PermissionError(f"{path} would be written outside the results folder {root}; refusing")
    return Path(path)


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Put ``path`` into an OSError without a file name (a full disk's ``write()``), so the CLI's line says where."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from None
        raise


def cache_root() -> Path:
    """The per-machine cache (wheels, GGUF model folders, digests): ``$MADARA_CACHE``, else ``~/.cache/madara``."""
    return Path(os.environ.get("MADARA_CACHE") or Path.home() / ".cache" / "madara")
