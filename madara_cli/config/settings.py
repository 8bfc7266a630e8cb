"""The plain cell: a composed config as a frozen record of plain values. Composition
(:mod:`madara_cli.composition.compose`) makes one from its resolved container and hands it on;
everything downstream (the walk, the plan, strategies, identity, records) reads it by attribute
or key, as it read OmegaConf's config, and never changes it: a changed setting is a new record
(:meth:`Node.merged`). OmegaConf stays at the composition edge (:func:`as_settings` takes a
``DictConfig`` a user or an old ``config.yaml`` hands in)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator


def _frozen(value: Any) -> Any:
    if isinstance(value, Node):
        return value
    if isinstance(value, Mapping):
        return Node(value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


class Node(Mapping):
    """One frozen node of settings: ``node.k``, ``node["k"]``, ``node.get("k", default)``, ``"k" in node``.
    Lists are tuples; a missing setting is an ``AttributeError`` / ``KeyError`` naming it."""

    __slots__ = ("_d",)

    def __init__(self, data: Mapping | None = None):
        object.__setattr__(self, "_d", {str(k): _frozen(v) for k, v in (data or {}).items()})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_d":
            raise AttributeError(name)
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(f"no setting '{name}' (settings: {', '.join(self._d) or 'none'})") from None

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"a composed cell is frozen: '{name}' cannot be set (merged() gives a changed copy)")

    def __reduce__(self):
        return (type(self), (self.to_dict(),))

    def __hash__(self) -> int:
        return hash(tuple(self._d.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Node):
            return self._d == other._d
        return isinstance(other, Mapping) and self.to_dict() == to_plain(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        """A plain, mutable deep copy: dicts and lists, as ``OmegaConf.to_container(resolve=True)`` gave."""
        return {k: to_plain(v) for k, v in self._d.items()}

    def merged(self, changes: Mapping) -> "Node":
        """A copy with ``changes`` laid over it: a mapping goes into a node, anything else replaces."""
        out = dict(self._d)
        for k, v in changes.items():
            old = out.get(k)
            out[str(k)] = old.merged(v) if isinstance(old, Node) and isinstance(v, Mapping) else _frozen(v)
        return self._made(out)

    def replace(self, **values: Any) -> "Node":
        """A copy with whole settings replaced (a node given here is not merged into the old one)."""
        return self._made({**self._d, **{k: _frozen(v) for k, v in values.items()}})

    def to_yaml(self) -> str:
        """The node as OmegaConf writes a config.yaml (read back by :func:`as_settings`)."""
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(self.to_dict())

    def _made(self, d: dict[str, Any]) -> "Node":
        made = object.__new__(type(self))
        object.__setattr__(made, "_d", d)
        return made


class Settings(Node):
    """A composed cell's settings: the groups (``model``, ``backend``, ``benchmark``, ``retriever``, ``strategy``)
    and the shared nodes (``generation``, ``reading``, ``rsc``, ``router``, ``logger``, ``health``)
    are :class:`Node` s; ``seed``, ``limit``, ``results_dir``, ``prompts``, ``cache``, ``grid_name``,
    ``force``, ``log_samples`` and ``overrides`` (the overrides as given) are plain values."""

    __slots__ = ()


def as_settings(config: Any) -> "Settings":
    """The plain cell of ``config``: a :class:`Settings` as it is, a mapping or an OmegaConf config resolved."""
    if isinstance(config, Settings):
        return config
    if isinstance(config, Node):
        return Settings(config.to_dict())
    if type(config).__module__.startswith("omegaconf"):
        config = to_plain(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"not a composed config: {type(config).__name__}")
    return Settings(config)


def to_plain(value: Any) -> Any:
    """A node's (or an OmegaConf config's, or any value's) plain copy: dicts, lists and values."""
    if isinstance(value, Node):
        return value.to_dict()
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value
