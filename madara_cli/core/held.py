"""Answers held for a block: while a grid composes or a plan walks (:func:`holding_files`), the
lookups marked :func:`held` (config file places, regular-file checks, installed distributions'
files and versions) answer what they answered first (a 10,000-cell plan asked the same few
hundred questions per cell): the machine as the block found it, like the composition's
remembered defaults (:func:`madara_cli.composition.compose.held_state`). Below the rest of
:mod:`madara_cli.config`: input digests and engine fingerprints hold their lookups here too.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

_HELD: dict[tuple, Any] | None = None
_F = TypeVar("_F", bound=Callable[..., Any])


@contextlib.contextmanager
def holding_files() -> Iterator[None]:
    """Answer the lookups marked :func:`held` from what they answered first, until the block ends."""
    global _HELD
    outer, _HELD = _HELD, (_HELD if _HELD is not None else {})
    try:
        yield
    finally:
        _HELD = outer


def held_key(name: str, *args: Any) -> tuple:
    """A held answer's key: the question and the config folders it was asked of."""
    return (name, os.environ.get("MADARA_CONFIG_DIR", ""), os.environ.get("MADARA_CONFIGS", ""), *args)


def is_held(key: tuple) -> bool:
    return _HELD is not None and key in _HELD


def hold(key: tuple, value: Any) -> None:
    """Remember ``value`` under ``key`` while a block holds (nothing otherwise)."""
    if _HELD is not None:
        _HELD[key] = value


def held(fn: _F) -> _F:
    """``fn``'s answers held while :func:`holding_files` holds (an error is not: it is raised again)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        if _HELD is None:
            return fn(*args)
        key = held_key(name, *args)
        if key not in _HELD:
            _HELD[key] = fn(*args)
        found = _HELD[key]
        return list(found) if isinstance(found, list) else found
    return wrapper  # type: ignore[return-value]
