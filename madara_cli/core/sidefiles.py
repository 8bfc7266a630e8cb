"""The files madara keeps beside its results and reads back on a rerun (an index's
``madara_index.json``, a hash memo, a cell's ``config.yaml``, a ``--config-dir``
YAML file), read through one guarded reader; the stamp a memo is keyed by; and the
one escape for stored text shown on a terminal.

Such a file may have been cut by a killed writer, written by a newer madara, copied
from someone else's results folder, or be no file at all (a FIFO named ``x.yaml``
blocks a plain ``open`` forever). Every reader here takes only a regular file, reads
it as UTF-8, parses JSON with the guards of :func:`parse_line` and YAML as plain
data (no tags, no aliases: a nine-line alias bomb expands to billions of nodes), and
turns whatever is wrong into ONE error naming the file and what is wrong. A memo that
cannot be read is not an error: it is rebuilt.

:func:`file_stamp` is what a memo of a file's content is keyed by: (inode, size,
mtime, ctime). Size and mtime alone let a same-size edit whose mtime was put back
(``touch -r``, ``cp -p``, an editor that keeps it) reuse the old digest; the kernel
sets ctime on every change and no user call can set it back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from madara_cli.core.errors import DataError

log = logging.getLogger(__name__)

Stamp = tuple[int, int, int, int]


def file_stamp(path: str | Path) -> Stamp:
    """(inode, size, mtime_ns, ctime_ns) of ``path``: equal stamps mean unchanged
    content for any memo of it (see the module docstring)."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# --------------------------------------------------------------------------- #
# One line of a user's JSON Lines file (benchmark=jsonl, corpora, the hub readers' pre-check,
# snapshots' meta). A user's file may hold what json refuses in ways that are not
# JSONDecodeError: nesting deeper than the recursion limit, an integer of more than 4,300
# digits, or a lone surrogate escape ("\ud800", which decodes to a string that no longer
# encodes as UTF-8). parse_line turns each into one DataError naming the file and line;
# a byte-order mark at the start of a file is accepted (ENCODING).

ENCODING = "utf-8-sig"  # UTF-8, with an optional byte-order mark at the start (dropped)

def parse_line(line: str, path: str | Path, line_no: int) -> Any:
    """The JSON value of one line, or one DataError naming ``path`` and ``line_no``."""

    def bad(what: str) -> DataError:
        return DataError(f"{path}:{line_no}: {what}")

    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise bad("not readable JSON: nested too deeply") from None
    except ValueError as e:  # int digits over sys.get_int_max_str_digits()
        raise bad(f"not readable JSON: {too_long_integer(e)}") from None
    if _SURROGATE_ESCAPE.search(line) and not encodes(value):
        raise bad("holds a \\ud800-\\udfff escape that is not half of a surrogate pair: not Unicode text (it cannot be written as UTF-8)")
    return value


def too_long_integer(e: ValueError) -> str:
    """The one-line reason for the ValueError of an integer over Python's digit limit."""
    import sys

    if "digits" in str(e):
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits (the most Python reads as a number)"
    return " ".join(str(e).split())[:160]


def encodes(value: Any) -> bool:
    """Whether every string in ``value`` encodes as UTF-8 (walked without recursion:
    a value nested as deep as :mod:`json` allows must not raise here)."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return True


# --------------------------------------------------------------------------- #
# Reading


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | Path, what: str, error: type[Exception] = DataError) -> Path:
    """``path`` when it is a regular file (a link to one counts), looked at without opening
    it; else one ``error`` saying that nothing is there, or what is (a FIFO, /dev/zero)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise error(f"{what.removeprefix('the ')} not found: {p}") from None
    except OSError as e:
        raise error(f"{p}: cannot read {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{p}: {what} is {_kind(mode)}, not a regular file; refusing to read it")
    return p


def open_regular(path: str | Path, what: str, error: type[Exception] = DataError, max_bytes: int | None = None) -> BinaryIO:
    """The regular file ``path``, open to read as bytes; anything else (a FIFO, a folder,
    a device such as /dev/zero) is one ``error`` saying what it is, without blocking: the
    file is opened non-blocking and checked before a byte is read. A file over
    ``max_bytes`` is one ``error`` too, before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: {what} is {_kind(st.st_mode)}, not a regular file; refusing to read it")
        if max_bytes is not None and st.st_size > max_bytes:
            raise error(f"{path}: {what} is {st.st_size / (1 << 20):.1f} MiB, over its limit of {max_bytes >> 10} KiB; refusing to read it")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


WHAT = "the benchmark file"


def open_local(path: str | Path, what: str = WHAT) -> BinaryIO:
    """A local data file, open to read once: one error for a missing one, and for a
    FIFO, folder or device saying what it is (one is not "not found")."""
    return open_regular(regular_file(Path(path).expanduser(), what), what)


def read_bytes(path: str | Path, what: str, error: type[Exception] = DataError, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`)."""
    with open_regular(path, what, error, max_bytes) as f:
        try:
            return f.read()
        except OSError as e:
            raise error(f"{path}: cannot read {what}: {e.strerror or e}") from None


def read_text(path: str | Path, what: str, error: type[Exception] = DataError, max_bytes: int | None = None) -> str:
    """The regular file ``path`` as UTF-8 text (a leading byte-order mark dropped); a
    byte that is not UTF-8 is one ``error`` naming where."""
    return decoded(read_bytes(path, what, error, max_bytes), path, what, error)


def decoded(data: bytes, path: str | Path, what: str, error: type[Exception] = DataError) -> str:
    """``data`` (the whole of ``path``) as UTF-8 text, a leading byte-order mark dropped."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{path}: {what} is not UTF-8 text: {_utf8_where(data, e)}") from None


def text_lines(f: BinaryIO, path: str | Path, what: str, error: type[Exception] = DataError) -> Iterator[str]:
    """Each line of ``f`` (from :func:`open_regular`) as UTF-8 text with its end, a leading
    byte-order mark dropped: a large file streamed in one read, a byte that is not UTF-8
    one ``error`` naming where (offset and line in the file)."""
    offset = 0
    for n, raw in enumerate(f, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(f"{path}: {what} is not UTF-8 text: {_utf8_where(raw, e, offset, n)}") from None
        yield line[1:] if n == 1 and line.startswith("\ufeff") else line
        offset += len(raw)


def _utf8_where(data: bytes, e: UnicodeDecodeError, offset: int = 0, line: int = 1) -> str:
    """Where ``data`` (at ``offset`` of its file, starting on ``line``) stops being UTF-8."""
    if e.reason == "unexpected end of data":
        return f"a character cut off at the end of the file (offset {offset + e.start})"
    line += data[: e.start].count(b"\n")
    return f"byte 0x{data[e.start]:02x} at offset {offset + e.start} (line {line})"


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_problem(text: str) -> tuple[Any, str | None]:
    """(value, None) for JSON text, or (None, why it is not readable JSON): the guards
    of :func:`madara_cli.core.sidefiles.parse_line` (syntax, nesting past the recursion limit,
    an integer over Python's digit limit, a lone surrogate escape)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
    except RecursionError:
        return None, "not readable JSON: nested too deeply"
    except ValueError as e:
        return None, f"not readable JSON: {too_long_integer(e)}"
    if _SURROGATE_ESCAPE.search(text) and not encodes(value):
        return None, "holds a \\ud800-\\udfff escape that is not half of a surrogate pair: not Unicode text"
    return value, None


_JSON_TYPES = {dict: "a JSON object", list: "a JSON list"}


def read_json(path: str | Path, what: str, expect: type = dict, error: type[Exception] = DataError) -> Any:
    """The JSON value of the regular file ``path``, of type ``expect``; a cut, foreign
    or hostile file is one ``error`` naming it and what is wrong."""
    value, problem = json_problem(read_text(path, what, error))
    if problem is None and not isinstance(value, expect):
        problem = f"holds {type(value).__name__}, not {_JSON_TYPES.get(expect, expect.__name__)}"
    if problem is not None:
        raise error(f"{path}: {what} is {problem}" if problem.startswith("not ") else f"{path}: {what} {problem}")
    return value


# --------------------------------------------------------------------------- #
# YAML as plain data: no tags, no aliases


def _yaml_loader() -> type:
    """OmegaConf's own loader (its float and duplicate-key rules, so a config reads as
    Hydra reads it) refusing every alias: ``*name`` copies a node by reference, and nine
    lines of them make a value of 9^9 nodes that OmegaConf would copy out in full."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    base = get_yaml_loader()

    class NoAliasLoader(base):  # type: ignore[misc, valid-type]
        def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"found an alias (*{event.anchor}): YAML aliases are refused (write the value out)", event.start_mark
                )
            return super().compose_node(parent, index)

    # OmegaConf's loader builds a pathlib.Path from a python/ tag; a side file holds data only.
    NoAliasLoader.yaml_constructors = {k: v for k, v in base.yaml_constructors.items() if not str(k).startswith("tag:yaml.org,2002:python/")}
    return NoAliasLoader


_LOADER: list[type] = []


def yaml_problem(text: str) -> tuple[Any, str | None]:
    """(plain data, None) for YAML text, or (None, one line saying where and what is
    wrong): a syntax error, a tag (data never becomes an object), an alias, nesting
    past the recursion limit, an integer over Python's digit limit, a lone surrogate."""
    import yaml

    if not _LOADER:
        _LOADER.append(_yaml_loader())
    loader = None
    try:
        loader = _LOADER[0](text)  # yaml.SafeLoader's subclass (OmegaConf's), less aliases and python/ tags; its reader refuses control characters
        value = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or getattr(e, "context", None) or e).split())
        hint = " (YAML tags are refused: a config holds data, never objects)" if "tag" in problem else ""
        return None, f"{where}{problem}{hint}"
    except RecursionError:
        return None, "nested too deeply to be a config"
    except ValueError as e:  # an integer over Python's 4,300-digit limit
        return None, too_long_integer(e)
    finally:
        if loader is not None:
            loader.dispose()
    if not encodes(value):
        return None, "holds a \\ud800-\\udfff escape that is not half of a surrogate pair: not Unicode text"
    return value, None


def read_yaml_data(path: str | Path, what: str, error: type[Exception] = DataError) -> Any:
    """The YAML of the regular file ``path`` as plain data (see :func:`yaml_problem`)."""
    value, problem = yaml_problem(read_text(path, what, error))
    if problem is not None:
        raise error(f"{path}: {problem}")
    return value


# --------------------------------------------------------------------------- #
# Memos of a file's content, keyed by its stamp


def read_memo(memo_file: Path) -> dict[str, Any]:
    """A memo's entries; a memo that is missing, cut, foreign or not UTF-8 is empty
    (said once, as a warning naming it): it only saves work, and is rebuilt."""
    if not memo_file.exists():
        return {}
    try:
        return read_json(memo_file, "memo")
    except DataError as e:
        log.warning("%s; ignoring it (it is rebuilt)", e)
        return {}


def write_memo(memo_file: Path, memo: dict[str, Any]) -> None:
    """Write ``memo`` whole under a temporary name, then rename it into place (a reader
    never sees a cut memo from this process; a parallel writer's entries may be lost,
    which costs a recomputation, never a wrong value)."""
    memo_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_file.with_name(f"{memo_file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(memo_file)


def stamp_memo(memo_file: Path | None, path: str | Path, compute: Callable[[Path], str], field: str = "value") -> str:
    """``compute(path)``, memoised in ``memo_file`` (JSON: resolved path -> stamp and
    ``field``) while :func:`file_stamp` of ``path`` is unchanged; without a memo file,
    computed every time."""
    p = Path(path).expanduser().resolve()
    if memo_file is None:
        return compute(p)
    stamp = list(file_stamp(p))
    memo = read_memo(memo_file)
    hit = memo.get(str(p))
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get(field), str):
        return hit[field]
    value = compute(p)
    if list(file_stamp(p)) == stamp:  # changed while it was read: keep no memo of it
        memo[str(p)] = {"stamp": stamp, field: value}
        try:
            write_memo(memo_file, memo)
        except OSError as e:  # a read-only cache folder: the memo only saves work, so the command goes on
            log.warning("cannot keep %s (%s): %s is computed again next time; point MADARA_CACHE at a writable folder",
                        memo_file, e.strerror or e, field)
    return value


# --------------------------------------------------------------------------- #
# Stored text on a terminal

# Bidirectional overrides and isolates reorder what a terminal shows (a name that reads
# as another); zero-width ones hide characters. Escaped with the control characters.
_FORMAT_SHOWN = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"} | {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}


def _escaped(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: object, keep_newlines: bool = False) -> str:
    """``text`` safe to print on a terminal: control characters (ESC, BEL, CR, C1
    controls: what moves the cursor, retitles the window or rewrites a line), lone
    surrogates and the bidirectional and zero-width marks become visible ``\\x1b``-style
    escapes (newlines and tabs too, unless ``keep_newlines``); everything else is left
    as it is. For text madara did not write itself in
    this run: a results folder, a cache or a config copied from someone else."""
    s = str(text)
    if s.isprintable() or not any(_needs_escape(c, keep_newlines) for c in s):
        return s
    return "".join(_escaped(c) if _needs_escape(c, keep_newlines) else c for c in s)


def _needs_escape(c: str, keep_newlines: bool) -> bool:
    if c in "\n\t":
        return not keep_newlines
    return unicodedata.category(c) in ("Cc", "Cs") or c in _FORMAT_SHOWN


def json_printable(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) safe on a terminal and still
    JSON: what :func:`printable` escapes becomes a ``\\u`` escape (json leaves C1
    controls, bidirectional marks and lone surrogates raw)."""
    if text.isprintable():
        return text
    return "".join(f"\\u{ord(c):04x}" if c not in "\n\t" and _needs_escape(c, True) else c for c in text)


__all__ = [
    "ENCODING", "Stamp", "WHAT", "decoded", "encodes", "file_stamp", "json_printable", "json_problem", "open_local", "open_regular", "parse_line",
    "printable", "read_bytes", "read_json", "read_memo", "read_text", "regular_file", "text_lines", "too_long_integer",
    "read_yaml_data", "stamp_memo", "write_memo", "yaml_problem",
]
