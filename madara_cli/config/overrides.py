"""Command-line overrides (``key=value``, ``+key=value``, ``~key``), parsed once into the
:class:`Override` records every reader reads (text, key and value split at the first ``=``,
Hydra's parse or the first line of its complaint), never the text itself."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable


@dataclass(frozen=True)
class Override:
    """One override as the user wrote it."""

    raw: str  # the text as written: "+strategy.scoring=logprob"
    key: str  # the key or group without its +, ++ or ~ prefix: "strategy.scoring", "hydra/launcher"
    value: str | None  # the text after the first "=", as written; None when there is no "="
    prefix: str = ""  # what came before the key: "", "+", "++", "~" (or a mix such as "+~")
    hydra: Any = field(default=None, compare=False, repr=False)  # Hydra's parse (hydra...overrides.Override); None when malformed
    error: str | None = field(default=None, compare=False)  # the first line of Hydra's complaint when malformed

    @property
    def deletes(self) -> bool:
        """``~key``: the prefix deletes (so the key is not given a value)."""
        return "~" in self.prefix

    @property
    def is_hydra_setting(self) -> bool:
        """A setting of Hydra itself (``hydra.launcher.partition=gpu``, ``hydra/launcher=...``)."""
        return self.key == "hydra" or self.key.startswith(("hydra.", "hydra/"))

    def __str__(self) -> str:
        return self.raw


# records by text: Hydra's grammar parses each override once per process (immutable, so shared safely)
_PARSED: dict[str, Override] = {}


@lru_cache(maxsize=1)
def _parser() -> Any:
    """Hydra's override parser, made once (making one inspects every function of its grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


# ``key=<int>`` read as Hydra's grammar would, without it (a 10,000-cell seed sweep spent a second
# there): whole-name keys, plain decimals (no sign but -, no leading 0, no _); tests/config compare records.
_PLAIN_INT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(-?(?:0|[1-9][0-9]{0,17}))")


def _plain_int(text: str) -> Override | None:
    m = _PLAIN_INT.fullmatch(text)
    if m is None:
        return None
    from hydra.core.override_parser.types import Override as HydraOverride
    from hydra.core.override_parser.types import OverrideType, ValueType

    parsed = HydraOverride(type=OverrideType.CHANGE, key_or_group=m.group(1), value_type=ValueType.ELEMENT, _value=int(m.group(2)),
                           package=None, input_line=text)
    return Override(text, m.group(1), m.group(2), "", parsed)


def _parse_one(text: str) -> Override:
    from hydra.errors import HydraException

    if (simple := _plain_int(text)) is not None:
        return simple
    head, eq, value = text.partition("=")  # split at the first "=", which never fails
    key = head.lstrip("+~")
    prefix, value = head[: len(head) - len(key)], value if eq else None
    try:
        (parsed,) = _parser().parse_overrides([text])
    except HydraException as e:  # OverrideParseException and friends
        why = str(e).strip().splitlines()[0]
        if value and value.startswith("~"):  # the shell leaves ~ alone after key=, and Hydra's grammar refuses it
            why += f" (the shell does not expand '~' after '='; write the path out: {key}=$HOME{value[1:]})"
        return Override(text, key, value, prefix, None, why)
    return Override(text, key, value, prefix, parsed)


def parse_overrides(overrides: Iterable[str | Override]) -> list[Override]:
    """Each override as an :class:`Override` (records kept; a text parsed before gets its record)."""
    return [item if isinstance(item, Override) else _record(str(item)) for item in overrides]


def _record(text: str) -> Override:
    if text not in _PARSED:
        _PARSED[text] = _parse_one(text)
    return _PARSED[text]


def malformed(overrides: Iterable[Override]) -> Override | None:
    """The first override Hydra cannot read, if any."""
    return next((o for o in overrides if o.error is not None), None)


def last_value(overrides: Iterable[Override], key: str) -> str | None:
    """The value of the last override setting ``key`` (with any prefix); None if none."""
    given = [o.value for o in overrides if o.key == key and o.value is not None]
    return given[-1] if given else None


def override_value(text: str) -> str:
    """``text`` as a Hydra override value: as is where read as plain text, else quoted (a ``[``, ``,``,
    ``=`` or space would read as a list, a sweep or another override)."""
    if re.fullmatch(r"[\w./~:+@%-]*", text):
        return text
    for q in ("'", '"'):
        if q not in text and not text.endswith("\\"):
            return f"{q}{text}{q}"
    return text
