"""Answers held for the length of a block: while a grid composes or a plan walks
(:func:`holding_files`), the lookups marked :func:`held` (where each config file is,
whether it is a regular file, an installed distribution's files and version) answer
what they answered first, not once per cell: a 10,000-cell plan asked the file system
and the package metadata the same few hundred questions per cell. The answers are
those of the machine as it was when the block started, as the composition's remembered
defaults step (:func:`madara_cli.composition.compose.held_state`) is.

Below everything else in :mod:`madara_cli.config`: the identity's input digests and the
engines' fingerprints hold their lookups here too.
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
    """``fn``'s answers held while :func:`holding_files` holds (an error is not held:
    it is raised again next time)."""
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
