"""What the benchmark loaders of this package share: reading the rows with a check of their
fields (:func:`read_checked`) and gold aliases from any of the shapes the datasets use (:func:`aliases`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.data.sources import read_rows


def aliases(*values: Any) -> tuple[str, ...]:
    """Flatten strings, lists and JSON-encoded lists into unique non-empty aliases,
    first occurrence first."""
    out: dict[str, None] = {}

    def add(v: Any) -> None:
        if v is None:
            return
        if isinstance(v, (list, tuple)):
            for x in v:
                add(x)
            return
        s = str(v).strip()
        if s.startswith("[") and s.endswith("]"):
            try:
                add(json.loads(s))
                return
            except json.JSONDecodeError:
                pass
        if s:
            out.setdefault(s, None)

    for v in values:
        add(v)
    return tuple(out)


def require(rows: list[dict], fields: Iterable[str], cfg: Node, hint: str) -> None:
    """One line naming the ``fields`` the first row lacks (``hint``: the rows expected)."""
    missing = [f for f in fields if f not in rows[0]] if rows else []
    if missing:
        raise DataError(f"benchmark {cfg.name}: rows lack field(s) {', '.join(missing)}; expected {hint}")


def read_checked(cfg: Node, fields: Iterable[str] = (), hint: str = "") -> list[dict]:
    """:func:`~madara_cli.data.sources.read_rows` (the hub, or ``benchmark.path``), checked by :func:`require`."""
    rows = read_rows(cfg)
    require(rows, fields, cfg, hint)
    return rows
