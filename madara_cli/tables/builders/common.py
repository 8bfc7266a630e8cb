"""What several builders share: the paper's labels, a table's rows, our EM for a cell, the MADARA
route and EM, the routing NF, McNemar tests with Holm stars, a record value as a number."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from madara_cli import paper as pv
from madara_cli.core import stats
from madara_cli.results.outputs import _num
from madara_cli.results.stored import Unsettled
from madara_cli.tables.compare import paired_outcomes
from madara_cli.tables.lookup import SPARSE, Results, StoredCell
from madara_cli.tables.pairs import Measured, Several


def model_label(m: str) -> str:
    """The paper's name for a model id (``qwen2.5-7b`` -> ``Qwen2.5-7B``); other ids as they are."""
    return pv.MODEL_LABELS.get(m, m)


def benchmark_label(b: str) -> str:
    """The paper's name for a benchmark id; other ids as they are."""
    return pv.BENCHMARK_LABELS.get(b, b)


def strategy_label(s: str | None) -> str | None:
    """The short name a paper table prints for a strategy id (``three_agent`` -> ``3-Agent``)."""
    return pv.STRATEGY_LABELS.get(s, s) if s else None


def class_label(c: str | None) -> str | None:
    """The paper's name for an RSC class (``quality-ordered`` -> ``Quality-Ordered``)."""
    return pv.CLASS_LABELS.get(c, c) if c else None


def number(x: Any) -> float | None:
    """A record value as a float (None: absent, not a number or NaN), as the records read one."""
    return _num(x)


def table_pairs(res: Results, paper_pairs: Iterable[tuple[str, str]], strategies: Iterable[str]) -> list[tuple[str, str]]:
    """The paper's (model, benchmark) rows, then any other pair our results hold for these strategies (beside "n/a")."""
    rows = list(dict.fromkeys(paper_pairs))
    wanted = set(strategies)
    extra = sorted({(c.model, c.benchmark) for c in res.cells if c.strategy in wanted} - set(rows))
    return rows + extra


def our_em(res: Results, model: str, benchmark: str, strategy: str, grid: str | None, retrievers: Sequence[str] = SPARSE) -> float | None:
    """Our EM in % for a cell, None when it has not run, :class:`Several` when no rule settles which variant."""
    cell = res.find(model, benchmark, strategy, grid, retrievers)
    if isinstance(cell, Unsettled):
        return Several(cell.variants)
    return None if cell is None or cell.em is None else Measured(100.0 * cell.em, cell.n, cell.f1, cell.contains,
                                                                 (cell.model, cell.benchmark, cell.strategy, cell.metric), cell.key,
                                                                 degraded=cell.degraded)


def percent(cell: StoredCell | None) -> float | None:
    """A cell's score in % (unlike :func:`our_em`, no F1 and contains), marked when degraded, :class:`Several` when unsettled."""
    if isinstance(cell, Unsettled):
        return Several(cell.variants)
    if cell is None or cell.em is None:
        return None
    return Measured(100 * cell.em, degraded=True) if cell.degraded else 100 * cell.em


def marked(value: float | None, cell: StoredCell | None) -> float | None:
    """``value`` read from ``cell``, marked when it is degraded (:class:`Several` when unsettled)."""
    if isinstance(cell, Unsettled):
        return Several(cell.variants)
    if value is None or cell is None or not cell.degraded:
        return value
    return Measured(float(value), degraded=True)


def minus(a: float | None, b: float | None) -> float | None:
    """``a − b`` (None when either is absent), unsettled or degraded when either is."""
    if a is None or b is None:
        return None
    if isinstance(a, Several) or isinstance(b, Several):
        return a if isinstance(a, Several) else b
    degraded = getattr(a, "degraded", False) or getattr(b, "degraded", False)
    return Measured(float(a) - float(b), degraded=True) if degraded else float(a) - float(b)


def percent_f1(cell: StoredCell | None) -> float | None:
    """A cell's token F1 in %, as every rate in the tables (the paper prints F1 as a fraction)."""
    if isinstance(cell, Unsettled):
        return Several(cell.variants)
    return None if cell is None or cell.f1 is None else 100 * cell.f1


def mean_of_all(values: Sequence[float | None]) -> float | None:
    """The mean of an average row: only when every row it averages has a value (unsettled when one is)."""
    several = next((v for v in values if isinstance(v, Several)), None)
    if several is not None:
        return several
    return float(np.mean(values)) if all(v is not None for v in values) else None


def madara_outcome(res: Results, model: str, benchmark: str, grid: str) -> tuple[str | None, float | None, StoredCell | None, str]:
    """Our routed strategy and MADARA EM: the ``madara`` cell if it ran, else the routed treatment's cell."""
    cell = res.find(model, benchmark, "madara", grid)
    probe = res.probe(model, benchmark)
    route = None
    if cell is not None:
        preds = cell.predictions() or ()
        routes = Counter(str(p.get("extra", {}).get("route")) for p in preds if p.get("extra", {}).get("route"))
        route = routes.most_common(1)[0][0] if routes else None
    if route is None and probe is not None:
        route = probe.route
    route = route.lower() if isinstance(route, str) else None
    if isinstance(cell, Unsettled):
        return route, Several(cell.variants), None, "madara cells (variants)"
    if cell is not None and cell.em is not None:
        return route, percent(cell), cell, "madara cell"
    if route:
        routed = res.find(model, benchmark, route, grid)
        if isinstance(routed, Unsettled):
            return route, Several(routed.variants), None, f"{route} cells (variants)"
        if routed is not None and routed.em is not None:
            return route, percent(routed), routed, f"{route} cell (routed)"
    return route, None, None, ""


def paired_test(method: StoredCell | None, base: StoredCell | None) -> tuple[int, int, int, float] | None:
    """(shared queries, b, c, exact McNemar p) of a method cell against a base cell; None unless both predictions are on disk."""
    if method is None or base is None:
        return None
    pm, pb = method.predictions(), base.predictions()
    if not pm or not pb:
        return None
    ids, a, b = paired_outcomes(pm, pb, method.outcome_metric)
    if not ids:
        return None
    bb, cc = stats.discordant(a > 0.5, b > 0.5)
    return len(ids), bb, cc, stats.mcnemar(bb, cc, "exact")


def mcnemar_pairs(cells: dict[Any, tuple[StoredCell | None, StoredCell | None]]) -> dict[Any, tuple[int, int, float]]:
    """(b, c, exact p) for each (method cell, base cell) pair whose predictions are both on disk."""
    tests = {key: paired_test(method, base) for key, (method, base) in cells.items()}
    return {key: test[1:] for key, test in tests.items() if test is not None}


def holm_stars(tests: dict[Any, tuple[int, int, float]]) -> dict[Any, str]:
    keys = list(tests)
    adjusted = stats.holm([tests[k][2] for k in keys]) if keys else []
    return {k: stats.significance_stars(p) for k, p in zip(keys, adjusted, strict=True)}


def routing_nf(res: Results, model: str, benchmark: str, grid: str | None) -> tuple[float | None, str | None]:
    """The NF EM (%) a routing table routes a pair on and its source: ``res.routing_nf``'s
    (``calibration``, the probe's, as strategy=madara; ``full``, the NF cell's), else the other, so the footnote says so."""
    full = our_em(res, model, benchmark, "nf", grid)
    probe = res.probe(model, benchmark)
    em_nf = None if probe is None or probe.em_nf is None else float(probe.em_nf)
    calibration = None if em_nf is None else 100.0 * em_nf
    order = [("calibration", calibration), ("full", full)]
    if getattr(res, "routing_nf", "calibration") == "full":
        order.reverse()
    for source, value in order:
        if value is not None:
            return value, source
    return None, None


ROUTING_NF_LABELS = {"calibration": "the RSC probe's NF on its calibration queries", "full": "the NF cell on the evaluated set"}


def routing_nf_note(res: Results, used: Iterable[str | None]) -> str:
    """The footnote naming the routing NF source, and any pair that fell back to the other."""
    chosen = getattr(res, "routing_nf", "calibration")
    other = "full" if chosen == "calibration" else "calibration"
    fell_back = sum(1 for u in used if u == other)
    note = (
        f"Routing NF = {ROUTING_NF_LABELS[chosen]} (`madara tables --routing-nf {chosen}`, the default being calibration, "
        f"which is what strategy=madara routes on; `--routing-nf {other}` uses {ROUTING_NF_LABELS[other]})."
    )
    if fell_back:
        note += f" {fell_back} pair(s) lack it and use {ROUTING_NF_LABELS[other]} instead."
    return note
