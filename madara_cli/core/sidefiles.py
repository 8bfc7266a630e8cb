"""The files kept beside results and read back on a rerun (an index's ``madara_index.json``, a
hash memo, a cell's ``config.yaml``, a ``--config-dir`` file) through one guarded reader; the
stamp a memo is keyed by; the one escape for stored text on a terminal.

Such a file may be cut by a killed writer, from a newer madara or someone else's folder, or no
file at all (a FIFO named ``x.yaml`` blocks ``open`` forever). Readers here take only a regular
file, as UTF-8, JSON with :func:`parse_line`'s guards, YAML as plain data (no tags, no aliases: a
nine-line alias bomb expands to billions of nodes), and make whatever is wrong ONE error naming
the file; an unreadable memo is rebuilt instead.

:func:`file_stamp` is (inode, size, mtime, ctime): size and mtime alone let a same-size edit
with its mtime put back (``touch -r``, ``cp -p``, some editors) reuse an old digest; the kernel
sets ctime on every change and no user call sets it back.
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
    """(inode, size, mtime_ns, ctime_ns) of ``path``: equal stamps mean unchanged content (module docstring)."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# --- One line of a user's JSON Lines file (benchmark=jsonl, corpora, the hub pre-check, snapshots' meta) ---
# json refuses some input other than by JSONDecodeError: nesting past the recursion limit, an integer
# over 4,300 digits, a lone surrogate escape ("\ud800": a string that no longer encodes as UTF-8).
# parse_line makes each one DataError naming file and line; a leading byte-order mark is accepted.

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
    """Whether every string in ``value`` encodes as UTF-8 (walked without recursion: json's deepest nesting must not raise)."""
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


# --- Reading ---


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | Path, what: str, error: type[Exception] = DataError) -> Path:
    """``path`` if a regular file (or a link to one), checked unopened; else one ``error`` saying nothing, or what, is there."""
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
    """The regular file ``path`` open to read bytes, opened non-blocking and checked before a byte
    is read: anything else (a FIFO, folder, /dev/zero), or a file over ``max_bytes``, is one ``error``."""
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
    """A local data file open to read: one error for a missing one, another naming a FIFO, folder or device."""
    return open_regular(regular_file(Path(path).expanduser(), what), what)


def read_bytes(path: str | Path, what: str, error: type[Exception] = DataError, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`)."""
    with open_regular(path, what, error, max_bytes) as f:
        try:
            return f.read()
        except OSError as e:
            raise error(f"{path}: cannot read {what}: {e.strerror or e}") from None


def read_text(path: str | Path, what: str, error: type[Exception] = DataError, max_bytes: int | None = None) -> str:
    """The regular file ``path`` as UTF-8 text, a leading BOM dropped; a non-UTF-8 byte is one ``error`` naming where."""
    return decoded(read_bytes(path, what, error, max_bytes), path, what, error)


def decoded(data: bytes, path: str | Path, what: str, error: type[Exception] = DataError) -> str:
    """``data`` (the whole of ``path``) as UTF-8 text, a leading byte-order mark dropped."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{path}: {what} is not UTF-8 text: {_utf8_where(data, e)}") from None


def text_lines(f: BinaryIO, path: str | Path, what: str, error: type[Exception] = DataError) -> Iterator[str]:
    """Each line of ``f`` (:func:`open_regular`) as UTF-8 text with its end, streamed, a leading BOM
    dropped; a non-UTF-8 byte is one ``error`` naming its offset and line."""
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
    """(value, None) for JSON text, or (None, why not) by :func:`parse_line`'s guards."""
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
    """The JSON value (of type ``expect``) of the regular file ``path``; a bad file is one ``error`` naming it."""
    value, problem = json_problem(read_text(path, what, error))
    if problem is None and not isinstance(value, expect):
        problem = f"holds {type(value).__name__}, not {_JSON_TYPES.get(expect, expect.__name__)}"
    if problem is not None:
        raise error(f"{path}: {what} is {problem}" if problem.startswith("not ") else f"{path}: {what} {problem}")
    return value


# --- YAML as plain data: no tags, no aliases ---


def _yaml_loader() -> type:
    """OmegaConf's loader (its float and duplicate-key rules: read as Hydra reads) refusing aliases
    (``*name`` copies by reference; nine lines make 9^9 nodes OmegaConf would copy out in full)."""
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
    """(plain data, None) for YAML text, or (None, one line: where and what): syntax, a tag (data
    never becomes an object), an alias, too deep, too long an integer, a lone surrogate."""
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


# --- Memos of a file's content, keyed by its stamp ---


def read_memo(memo_file: Path) -> dict[str, Any]:
    """A memo's entries; a missing or bad one is empty (a warning names it): it only saves work, and is rebuilt."""
    if not memo_file.exists():
        return {}
    try:
        return read_json(memo_file, "memo")
    except DataError as e:
        log.warning("%s; ignoring it (it is rebuilt)", e)
        return {}


def write_memo(memo_file: Path, memo: dict[str, Any]) -> None:
    """Write ``memo`` whole under a temporary name, then rename it in (never seen cut; a parallel
    writer's entries may be lost: a recomputation, never a wrong value)."""
    memo_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_file.with_name(f"{memo_file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(memo_file)


def stamp_memo(memo_file: Path | None, path: str | Path, compute: Callable[[Path], str], field: str = "value") -> str:
    """``compute(path)``, memoised in ``memo_file`` (resolved path -> stamp and ``field``) while its
    :func:`file_stamp` holds; without a memo file, computed every time."""
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


# --- Stored text on a terminal ---

# bidirectional overrides and isolates reorder what a terminal shows, zero-width marks hide characters: escaped too
_FORMAT_SHOWN = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"} | {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}


def _escaped(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: object, keep_newlines: bool = False) -> str:
    """``text`` safe on a terminal, for text madara did not write this run (a copied results folder,
    cache or config): control characters (ESC, BEL, CR, C1: cursor moves, retitles, rewrites), lone
    surrogates and bidirectional and zero-width marks become ``\\x1b``-style escapes (newlines and
    tabs too, unless ``keep_newlines``); the rest is left."""
    s = str(text)
    if s.isprintable() or not any(_needs_escape(c, keep_newlines) for c in s):
        return s
    return "".join(_escaped(c) if _needs_escape(c, keep_newlines) else c for c in s)


def _needs_escape(c: str, keep_newlines: bool) -> bool:
    if c in "\n\t":
        return not keep_newlines
    return unicodedata.category(c) in ("Cc", "Cs") or c in _FORMAT_SHOWN


def json_printable(text: str) -> str:
    """JSON text (``ensure_ascii=False``) safe on a terminal and still JSON: what :func:`printable`
    escapes becomes ``\\u`` (json leaves C1 controls, bidirectional marks, lone surrogates raw)."""
    if text.isprintable():
        return text
    return "".join(f"\\u{ord(c):04x}" if c not in "\n\t" and _needs_escape(c, True) else c for c in text)


__all__ = [
    "ENCODING", "Stamp", "WHAT", "decoded", "encodes", "file_stamp", "json_printable", "json_problem", "open_local", "open_regular", "parse_line",
    "printable", "read_bytes", "read_json", "read_memo", "read_text", "regular_file", "text_lines", "too_long_integer",
    "read_yaml_data", "stamp_memo", "write_memo", "yaml_problem",
]
