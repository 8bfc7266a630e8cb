"""Validation before work: every setting is checked at composition, before data loads or a model
starts, and a bad one is one line naming the key, what it got and what it accepts. Two passes,
both from :func:`madara_cli.composition.compose`:

* :func:`check_override_types` reads each ``key=value`` against the dataclass schemas before
  Hydra merges it (``limit=abc`` -> "limit: expected an integer or null, got 'abc'", not Hydra's
  "Error merging override" with an unrelated key list); ``strategy.X`` against the chosen
  strategy's schema ("strategy.kappa does not apply to strategy sda; its settings: ...").
* :func:`validate_config` checks the composed config's ranges and refuses pairs of settings
  where one silently undoes the other (:data:`CONFLICTS`); choices are Enum fields OmegaConf enforces.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable

from madara_cli.config.keys import strategy_impl
from madara_cli.config.overrides import Override, malformed, parse_overrides
from madara_cli.config.settings import Settings, to_plain
from madara_cli.plugins.shape import int_range, num_range


def _int(lo: int | None = None, hi: int | None = None, optional: bool = False) -> tuple[Callable[[Any], bool], str]:
    r = int_range(lo, hi, optional)
    return r.ok, r.description


def _num(lo: float | None = None, hi: float | None = None, optional: bool = False, lo_open: bool = False,
         hi_open: bool = False) -> tuple[Callable[[Any], bool], str]:
    r = num_range(lo, hi, optional, lo_open, hi_open)
    return r.ok, r.description


# Bounds of the counts in a cell's folder name (``-k<k>__n<limit>__s<seed>``): with NAME_MAX_BYTES every
# file name stays under 255 bytes; seeds are 32-bit in llama.cpp, vLLM and numpy.
MAX_SEED = 2**32 - 1
MAX_LIMIT = 10**9
MAX_K = 10_000
MAX_CONTEXT = 1 << 20  # tokens: more than any model madara ships reads (Llama 3.1: 131,072)
MIN_PROMPT = 64  # tokens a context keeps for the prompt beside the largest reply budget
MAX_TEMPERATURE = 2.0  # the OpenAI API's bound; at 2 sampling is near uniform already

# ranges of the numeric settings every option has (each plug-in declares its own in its spec)
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "limit": _int(1, MAX_LIMIT, optional=True),
    "seed": _int(0, MAX_SEED),
    "model.max_model_len": _int(1, MAX_CONTEXT),
    "model.temperature": _num(0.0, MAX_TEMPERATURE),
    "model.params_b": _num(0.0, optional=True, lo_open=True),
    "backend.batch_size": _int(1),
    "benchmark.sample": _int(1, optional=True),
    "benchmark.calibration": _int(0),
    "retriever.k": _int(1, MAX_K),
    "generation.max_tokens": _int(1),
    "generation.score_max_tokens": _int(1),
    "generation.cot_max_tokens": _int(1),
    "rsc.bootstrap": _int(1),
    "router.iso_alpha": _num(0.0, 1.0, lo_open=True, hi_open=True),  # a significance level
    "router.iso_min_gain": _num(0.0),
    "health.max_imputed": _num(0.0, 1.0),  # a share of a stage's scores
}


def _get(cfg: Mapping, dotted: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _show(v: Any) -> str:
    return "null" if v is None else repr(v) if isinstance(v, str) else str(v)


# settings that name results folders and files or a tracker's experiment: held to madara_cli.core.paths.name_problem
PATH_NAMES = ("grid_name", "model.name", "benchmark.name", "strategy.name", "retriever.name", "logger.experiment")


def validate_config(cfg: Settings, error: type[Exception], plain: dict | None = None) -> None:
    """Raise ``error`` (one line) on the first setting outside its range (``plain``: the config as plain data, if held)."""
    from madara_cli.core.paths import check_name

    # plain data: an OmegaConf read costs ~0.1 ms, a hundred per cell (plug-ins' own checks get the config)
    plain = to_plain(cfg) if plain is None else plain
    for key in PATH_NAMES:
        present, v = _get(plain, key)
        if present:
            check_name(key, v, error)
    specs = chosen_specs(plain)
    ranges = dict(RANGES)
    for spec in specs:  # each plug-in's own ranges, beside its schema, on the node it reads (a loader's: benchmark)
        ranges.update({f"{type(spec).node or type(spec).kind}.{k}": (r.ok, r.description) for k, r in spec.ranges.items()})
    for key, (ok, desc) in ranges.items():
        present, v = _get(plain, key)
        if present and not ok(v):
            raise error(f"{key}={_show(v)} is out of range: expected {desc}")
    for spec in specs:  # and its own checks
        for check in spec.checks:
            check(cfg)
    check_conflicts(plain, error)  # settings of different groups, or kinds, that undo each other
    check_budgets(plain, error)
    from madara_cli.plugins.catalog import CATALOG

    for spec in specs:
        for family in spec.families():
            if CATALOG.family(family) is None:
                raise error(f"{type(spec).kind} {spec.name} sends prompt family '{family}', which nothing declares; "
                            f"declared families: {', '.join(sorted(CATALOG.families()))}")


def chosen_specs(cfg: Mapping) -> list:
    """The registered specs of the backend, retriever, strategy and loader ``cfg`` chose (composition loads them first)."""
    from madara_cli.plugins.catalog import CATALOG

    out = []
    for kind, node, name in (("backend", "backend", "name"), ("retriever", "retriever", "name"), ("loader", "benchmark", "loader")):
        present, value = _get(cfg, f"{node}.{name}")
        spec = CATALOG.find(kind, str(value)) if present else None
        if spec is not None:
            out.append(spec)
    if "strategy" in cfg:
        spec = CATALOG.find("strategy", strategy_impl(cfg["strategy"]))
        if spec is not None:
            out.append(spec)
    return out


# --- Conflicting pairs ---

ANY = object()  # a setting's value does not matter, only that it was set


@dataclass(frozen=True)
class Conflict:
    """A setting other settings silently undo: ``asked`` (key, value), when ``written`` only if the
    user wrote it (the value is also a default: ``strategy.conflict=per_query``); ``beside``, every
    (key, value) that must hold too; ``why``, what happens instead and the way out."""

    asked: tuple[str, Any]
    beside: tuple[tuple[str, Any], ...]
    why: str
    written: bool = True


# read in agents/scoring.py (detector calls, CoT scores), config/keys.py isolation_on, diagnose/probe.py _thresholds
CONFLICTS: tuple[Conflict, ...] = (
    Conflict(("strategy.conflict", "per_query"), (("reading.conflict", "score_field"),),
             "the authors' reading asks the Conflict Detector about each document (per_document); "
             "drop strategy.conflict or use reading.conflict=adjustment"),
    Conflict(("strategy.scoring", "logprob"), (("strategy.cot", True),),
             "CoT scores are generated text; use strategy.scoring=generate", written=False),
    Conflict(("rsc.isolation_probe", False), (("router.policy", "isolation"),),
             "the isolation policy routes on the isolation gain, so its probe runs; drop rsc.isolation_probe=false "
             "or use router.policy=paper"),
    Conflict(("router.iso_alpha", ANY), (("router.policy", "paper"), ("rsc.isolation_probe", False)),
             "nothing measures the isolation gain it tests; add router.policy=isolation (or rsc.isolation_probe=true "
             "to print its route) or drop it"),
    Conflict(("router.iso_min_gain", ANY), (("router.policy", "paper"), ("rsc.isolation_probe", False)),
             "nothing measures the isolation gain it bounds; add router.policy=isolation (or rsc.isolation_probe=true "
             "to print its route) or drop it"),
)


def _written_keys(cfg: Mapping) -> set[str]:
    """The setting keys the overrides a config was composed with write (``cfg.overrides``)."""
    try:
        written = [str(x) for x in cfg.get("overrides") or []]
    except Exception:  # noqa: BLE001 - a config without its overrides: nothing was written
        return set()
    return {o.key for o in parse_overrides(written) if o.hydra is not None and not o.hydra.is_delete()}


def _holds(cfg: Mapping, key: str, want: Any) -> tuple[bool, Any]:
    """(whether ``key`` holds ``want`` in the composed config, its value)."""
    present, value = _get(cfg, key)
    if not present:
        return False, value
    if want is ANY:
        return True, value
    if isinstance(want, bool):
        return value is want, value
    return str(value) == str(want), value


def check_conflicts(cfg: Mapping, error: type[Exception]) -> None:
    """Raise ``error`` (one line naming both) on the first pair of :data:`CONFLICTS` the config holds."""
    written: set[str] | None = None
    for c in CONFLICTS:
        key, want = c.asked
        held, value = _holds(cfg, key, want)
        if not held or not all(_holds(cfg, k, v)[0] for k, v in c.beside):
            continue
        if c.written:
            written = _written_keys(cfg) if written is None else written
            if key not in written:
                continue
        beside = " and ".join(f"{k}={_shown(_get(cfg, k)[1])}" for k, _ in c.beside)
        raise error(f"{key}={_shown(value)} conflicts with {beside}: {c.why}")


BUDGETS = ("max_tokens", "score_max_tokens", "cot_max_tokens", "rescore_max_tokens")


def check_budgets(cfg: dict, error: type[Exception], context: int | None = None, where: str | None = None) -> None:
    """Every reply budget leaves :data:`MIN_PROMPT` tokens of the context (``backend.n_ctx``, else
    ``model.max_model_len``, or a server's ``context`` described by ``where``) to its prompt
    (``n_ctx=1`` cut prompts to nothing; ``max_tokens=100000000`` was priced at 462 hours)."""
    gen, backend = cfg.get("generation") or {}, cfg.get("backend") or {}
    if context is None:
        key = "backend.n_ctx" if backend.get("n_ctx") else "model.max_model_len"
        context = _get(cfg, key)[1]
        where = f"{key}={context}"
    if not isinstance(context, int):
        return
    for name in BUDGETS:
        budget = gen.get(name)
        if isinstance(budget, int) and budget + MIN_PROMPT > context:
            raise error(f"generation.{name}={budget} leaves no room for a prompt in {where} (a reply shares the context with "
                        f"its prompt, which needs at least {MIN_PROMPT} tokens): lower the budget or raise the context")


def _shown(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else "null" if v is None else str(v)


# --- Override types ---


@functools.lru_cache(maxsize=512)
def _hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)`` once per schema (about a millisecond a cell); read only."""
    return typing.get_type_hints(cls)


def _schema_field(root: type, dotted: str, groups: dict[str, type | None] | None = None) -> tuple[str, Any] | None:
    """("ok", type) of ``dotted`` in the schema, ("unknown", parent class) when its last part is no
    field, None outside it (a free-form node); ``group.X`` of ``groups`` in the chosen option's schema."""
    cls = root
    parts = dotted.split(".")
    if groups is not None and parts[0] in groups and len(parts) > 1:
        if groups[parts[0]] is None:
            return None
        cls, parts = groups[parts[0]], parts[1:]
    for i, part in enumerate(parts):
        hints = _hints(cls)
        if part not in hints:
            return ("unknown", cls)
        t = hints[part]
        if i == len(parts) - 1:
            return ("ok", t)
        if not (isinstance(t, type) and dataclasses.is_dataclass(t)):
            return None
        cls = t
    return None


def _choices(t: Any) -> tuple[list[str], bool] | None:
    """(valid names, null allowed) of an Enum field, ``Optional[Enum]`` included."""
    optional = False
    if typing.get_origin(t) is typing.Union:
        inner = [a for a in typing.get_args(t) if a is not type(None)]
        optional, t = True, inner[0]
    if isinstance(t, type) and issubclass(t, Enum):
        return [m.name for m in t], optional
    return None


def _type_ok(t: Any, v: Any) -> tuple[bool, str]:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        if v is None:
            return True, ""
        ok, desc = _type_ok(inner[0], v)
        return ok, f"{desc} or null"
    if isinstance(t, type) and issubclass(t, Enum):
        return isinstance(v, str) and v in t.__members__, "one of " + ", ".join(t.__members__)
    if t is bool:
        return isinstance(v, bool), "true or false"
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool), "an integer"
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool), "a number"
    if t is str:
        return v is not None and not isinstance(v, (list, dict)), "a string"
    if origin is list:
        if not isinstance(v, list):
            return False, "a list, e.g. [0.4,0.3,0.3]"
        item = args[0] if args else Any
        return all(_type_ok(item, x)[0] for x in v) if item is not Any else True, "a list of " + _type_ok(item, 0)[1].removeprefix("an ").removeprefix("a ") + "s"
    return True, ""


def not_applicable(key: str, option: str, settings: list[str], group: str = "strategy") -> str:
    """The one line for a setting the chosen strategy (backend, retriever) does not read."""
    return f"{key} does not apply to {group} {option}; its settings: {', '.join(settings)}"


def check_override_types(overrides: list[str] | list[Override], root: type, error: type[Exception],
                         strategy: tuple[str, type] | None = None, groups: dict[str, tuple[str, type | None]] | None = None) -> None:
    """Check every plain ``key=value`` override against its schema type; an unknown key names its
    node's valid ones. ``groups``: each pluggable group's chosen (option, schema) (``strategy``
    alone: the strategy's); a ``group.X`` this option lacks names this option's settings."""
    from madara_cli.config.plugin_schemas import all_settings

    chosen = dict(groups or {})
    if strategy is not None:
        chosen["strategy"] = strategy
    schemas = {g: s for g, (_, s) in chosen.items()}
    group_names = {"model", "backend", "benchmark", "retriever", "strategy", "grid", "logger"}
    parsed = parse_overrides(overrides)
    bad = malformed(parsed)
    if bad is not None:
        raise error(f"malformed override: {bad.error}")
    for written in parsed:
        o = written.hydra
        key = o.key_or_group
        if o.package or key in group_names or key.split(".")[0] == "hydra" or o.is_sweep_override() or o.is_delete() or o.is_force_add():
            continue
        head = key.split(".")[0]
        if o.is_add() and head not in chosen:
            continue
        found = _schema_field(root, key, schemas)
        if found is None:
            continue
        status, t = found
        if status == "unknown":
            valid = [f.name for f in dataclasses.fields(t)]
            if head in chosen and key.count(".") == 1:
                if key.split(".", 1)[1] in all_settings(head) or head != "strategy":  # another option reads it: name this one's
                    raise error(not_applicable(key, str(chosen[head][0]), valid, head))
            parent = key.rsplit(".", 1)[0] + " " if "." in key else ""
            raise error(f"bad config: unknown key '{key}'; valid {parent}keys: {', '.join(valid)}")
        if o.is_add():  # +strategy.X on a setting the schema has: Hydra names the clash
            continue
        v = o.value()
        if isinstance(v, str) and "${" in v:  # an interpolation: checked once resolved (validate_config)
            continue
        ok, desc = _type_ok(t, v)
        if not ok:
            if v == "":
                raise error(f"{key}= has no value: expected {desc}" + (f" (write {key}=null to unset it)" if "null" in desc else ""))
            choice = _choices(t)
            if choice is not None:
                names, optional = choice
                raise error(f"{key}={_show(v)} is not a valid choice; valid: {', '.join((['null'] if optional else []) + names)}")
            shown = written.value if written.value is not None else _show(v)
            raise error(f"{key}: expected {desc}, got '{shown}'")
