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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Hidden names are the store's own (.tmp-* folders being written, .hydra job folders).
_BAD_CHARS = ("/", "\\", "\0")


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot be one folder or file name component, or None if it can."""
    text = str(value)
    if not text.strip():
        return "it is empty"
    if any(c in text for c in _BAD_CHARS):
        return "it holds a path separator"
    if any(ord(c) < 32 for c in text):
        return "it holds a control character"
    if text.startswith("."):
        return "it starts with '.' (hidden and relative names are the store's own)"
    return None


def check_name(key: str, value: object, error: type[Exception]) -> None:
    """Raise ``error`` (one line) when setting ``key``'s value cannot name a folder."""
    problem = name_problem(value)
    if problem:
        raise error(f"{key}={value!r} cannot name a results folder: {problem}; use letters, digits, '-', '_' and '.'")


def inside(root: str | Path, path: str | Path) -> Path:
    """``path``, after making sure it lies inside ``root``. Judged on the names alone
    (``..`` folded, links not followed): a results subfolder that the user linked to
    another disk on purpose stays usable."""
    base = Path(os.path.abspath(root))
    target = Path(os.path.abspath(path))
    if target != base and base not in target.parents:
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


def utf8_error(path: str | Path) -> str | None:
    """Where ``path`` stops being UTF-8 ("byte 0xff at offset 1234 (line 5)"), or None
    when all of it decodes. Read in blocks, so a large corpus costs no memory."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            pending = decoder.getstate()[0]  # bytes of a character split across blocks
            try:
                decoder.decode(block)
            except UnicodeDecodeError as e:
                data = pending + block
                at = offset - len(pending) + e.start
                line = lines + data[: e.start].count(b"\n") + 1
                return f"byte 0x{data[e.start]:02x} at offset {at} (line {line})"
            offset += len(block)
            lines += block.count(b"\n")
        pending = decoder.getstate()[0]
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return f"a character cut off at the end of the file (offset {offset - len(pending)})"
    return None
