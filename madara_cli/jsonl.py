"""Reading one line of a user's JSON Lines file, the one way every reader does it
(benchmark=jsonl, corpora, the pre-check of the hub-format readers, snapshots' meta).

A user's file may hold what :mod:`json` refuses in ways that are not
``JSONDecodeError``: nesting deeper than the interpreter's recursion limit
(``RecursionError``), an integer of more than 4,300 digits (``ValueError``, Python's
limit on int/str conversion), or a ``"\\ud800"`` escape, a lone surrogate that decodes
to a string which no longer encodes as UTF-8 (it failed later, in the question hash).
:func:`parse_line` turns each into one :class:`~madara_cli.errors.DataError` naming
the file and line. A UTF-8 byte-order mark at the start of a file is accepted
(:data:`ENCODING`, ``utf-8-sig``), as editors on Windows write it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from madara_cli.errors import DataError

ENCODING = "utf-8-sig"  # UTF-8, with an optional byte-order mark at the start (dropped)

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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
