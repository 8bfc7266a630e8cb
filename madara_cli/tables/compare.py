"""Paired comparison of two finished cells on their shared ids, as the paper compares methods:
McNemar on the discordant pairs (Appendix G.3) and a paired bootstrap (Table 6). Cells of
different benchmarks or questions, or with an id twice, are refused: they are not pairs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from madara_cli.core import stats
from madara_cli.results.health import MARK
from madara_cli.results.record_files import METRICS_FILE, PREDICTIONS, read_cell, read_predictions


def paired_outcomes(preds_a: tuple[dict[str, Any], ...], preds_b: tuple[dict[str, Any], ...],
                    metric: str = "em") -> tuple[list[str], np.ndarray, np.ndarray]:
    """Shared ids (in A's order) and the two metric vectors aligned on them."""
    by_id_b = {str(p["id"]): p for p in preds_b}
    ids = [str(p["id"]) for p in preds_a if str(p["id"]) in by_id_b]
    by_id_a = {str(p["id"]): p for p in preds_a}
    a = np.array([float(by_id_a[i].get(metric, 0) or 0) for i in ids])
    b = np.array([float(by_id_b[i].get(metric, 0) or 0) for i in ids])
    return ids, a, b


# Below this many pairs a percentile interval says more about the resampler than the methods;
# exact McNemar and Newcombe's paired interval (madara_cli.core.stats) hold at any n.
MIN_PAIRS_FOR_CI = stats.MIN_N_FOR_BOOTSTRAP


def _rows_by_id(preds: tuple[dict[str, Any], ...], folder: Path, metric: str) -> dict[str, dict[str, Any]]:
    """A cell's rows by id; ValueError for a row without an id or outcome, or an id twice (pairing would keep one)."""
    where = Path(folder) / PREDICTIONS
    by_id: dict[str, dict[str, Any]] = {}
    dups: list[str] = []
    for line, p in enumerate(preds, start=1):
        if not isinstance(p, dict) or p.get("id") in (None, ""):
            raise ValueError(f"{where}: row {line} has no example id")
        value = p.get(metric, 0)
        if value is not None and (isinstance(value, str) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}: row {line} ({p['id']}): {metric} {value!r} is not a number")
        i = str(p["id"])
        if i in by_id and i not in dups:
            dups.append(i)
        by_id[i] = p
    if dups:
        raise ValueError(f"{where}: {len(dups)} example id(s) occur more than once ({', '.join(dups[:3])}{', ...' if len(dups) > 3 else ''}); "
                         "a cell has one row per query, so it cannot be paired (rerun it with force=true)")
    return by_id


def _same_data(dir_a: Path, dir_b: Path, ids: list[str], rows_a: dict, rows_b: dict) -> list:
    """Both cells' records; ValueError unless both ran on one benchmark and ask the same question under each shared id."""
    records = []
    for d in (dir_a, dir_b):
        record = read_cell(d)
        if record is None:
            raise ValueError(f"{d} is not a finished cell (it has predictions but no {METRICS_FILE}: unfinished or copied half); "
                             "rerun it, or compare finished cells")
        records.append(record)
    a, b = records
    if a.benchmark != b.benchmark:
        raise ValueError(f"A ran on benchmark {a.benchmark}, B on {b.benchmark}: the same ids name different questions there, "
                         "so the cells cannot be paired; compare two cells of one benchmark")
    differ = [i for i in ids if "question" in rows_a[i] and "question" in rows_b[i]
              and " ".join(str(rows_a[i]["question"]).split()) != " ".join(str(rows_b[i]["question"]).split())]
    if differ:
        i = differ[0]
        raise ValueError(f"{len(differ)} of {len(ids)} shared ids hold different questions in A and B (first: {i}: "
                         f"{str(rows_a[i]['question'])[:60]!r} vs {str(rows_b[i]['question'])[:60]!r}): the cells ran on "
                         "different data (benchmark.path, corpus or version), so they cannot be paired")
    return records


def no_ci_reason(diff: np.ndarray, min_pairs: int = MIN_PAIRS_FOR_CI) -> str | None:
    """Why a paired bootstrap CI would mislead (None: it is shown): under ``min_pairs`` pairs, or every
    pair differing alike (each resample has the same mean: zero width and p = 0 at any n)."""
    if diff.size < min_pairs:
        return (f"n = {diff.size} pairs is below {min_pairs}, too few for a percentile interval (--min-pairs); "
                "read the exact McNemar p")
    if np.unique(diff).size == 1:
        return (f"every pair differs by the same {100 * float(diff[0]):+.0f}pp, so every resample has the same mean "
                "(a zero-width interval); read the exact McNemar p")
    return None


COMPARE_METRICS = ("em", "em_strict", "f1", "contains")
# A graded metric (F1) counts a query as answered right above this, for McNemar's b and c.
GRADED_RIGHT = 0.5


def compare_cells(dir_a: Path, dir_b: Path, n_resamples: int = 10_000, seed: int = 0, min_pairs: int = MIN_PAIRS_FOR_CI,
                  metric: str = "em") -> dict[str, Any]:
    """Compare cell A against cell B on their shared ids by ``metric`` (:data:`COMPARE_METRICS`; keys
    named after it, ``em_a``, ``f1_a``; for F1, b and c count F1 above :data:`GRADED_RIGHT`).

    Each side's mean with its 95% interval and Δ with its paired one (:mod:`madara_cli.core.stats`'
    small-n rule), b (A right, B wrong) and c, McNemar p (exact, χ² cc), and a seeded paired
    bootstrap CI and p (None where :func:`no_ci_reason` says why). ValueError for a folder that
    is no finished cell, an id twice, no shared id, or different benchmarks or questions.
    """
    if metric not in COMPARE_METRICS:
        raise ValueError(f"unknown metric '{metric}'; valid: {', '.join(COMPARE_METRICS)}")
    dir_a, dir_b = Path(dir_a), Path(dir_b)
    preds_a, preds_b = read_predictions(dir_a), read_predictions(dir_b)
    rows_a, rows_b = _rows_by_id(preds_a, dir_a, metric), _rows_by_id(preds_b, dir_b, metric)
    ids, em_a, em_b = paired_outcomes(preds_a, preds_b, metric)
    if not ids:
        raise ValueError(f"{dir_a} and {dir_b} share no example ids: were they run on the same benchmark and limit?")
    record_a, record_b = _same_data(dir_a, dir_b, ids, rows_a, rows_b)
    b, c = stats.discordant(em_a > GRADED_RIGHT, em_b > GRADED_RIGHT)
    reason = no_ci_reason(em_a - em_b, min_pairs)
    boot = None if reason else stats.paired_bootstrap(em_a, em_b, n_resamples=n_resamples, seed=seed)
    diff = stats.difference_interval(em_a, em_b, n_resamples=n_resamples, seed=seed)
    own_a, own_b = stats.mean_interval(em_a), stats.mean_interval(em_b)
    m = metric
    return {
        "dir_a": str(dir_a), "dir_b": str(dir_b), "metric": m, "n": len(ids),
        "only_in_a": len(rows_a) - len(ids), "only_in_b": len(rows_b) - len(ids), f"{m}_a": float(em_a.mean()), f"{m}_b": float(em_b.mean()),
        "b": b, "c": c, "p_mcnemar_exact": stats.mcnemar(b, c, "exact"), "p_mcnemar_chi2_cc": stats.mcnemar(b, c, "chi2-cc"),
        f"{m}_a_ci": [own_a.low, own_a.high], f"{m}_b_ci": [own_b.low, own_b.high],
        "interval_method": f"{own_a.method} (each cell), {diff.method} (Δ)",
        "mean_diff": float((em_a - em_b).mean()), "diff_ci_low": diff.low, "diff_ci_high": diff.high,
        "ci_low": None if boot is None else boot.ci_low, "ci_high": None if boot is None else boot.ci_high,
        "p_bootstrap": None if boot is None else boot.p_value, "no_ci_reason": reason, "n_resamples": n_resamples, "seed": seed,
        # what each side's numbers rest on (results/health.py): "" when not degraded
        "degraded_a": record_a.health.reason if record_a.health.degraded else "",
        "degraded_b": record_b.health.reason if record_b.health.degraded else "",
    }


def _ci(pair, signed: bool = False) -> str:
    if not pair or None in pair:
        return ""
    spec = "+.1f" if signed else ".1f"
    return f" [{format(100 * pair[0], spec)}, {format(100 * pair[1], spec)}]"


def format_comparison(result: dict[str, Any]) -> str:
    """Human-readable summary of :func:`compare_cells` (the metric in %)."""
    r = result
    m = r.get("metric", "em")
    name = {"em": "EM", "em_strict": "EM (strict)", "f1": "F1"}.get(m, m)
    mark = {side: MARK if r.get(f"degraded_{side}") else "" for side in "ab"}
    lines = [
        f"A: {r['dir_a']}" + (f"   {MARK} degraded: {r['degraded_a']}" if mark["a"] else ""),
        f"B: {r['dir_b']}" + (f"   {MARK} degraded: {r['degraded_b']}" if mark["b"] else ""),
        f"paired on {r['n']} shared ids (only in A: {r['only_in_a']}, only in B: {r['only_in_b']}); Δ = A − B (positive: A scores higher)",
        f"{name}  A {100 * r[f'{m}_a']:.1f}%{mark['a']}{_ci(r.get(f'{m}_a_ci'))}   B {100 * r[f'{m}_b']:.1f}%{mark['b']}{_ci(r.get(f'{m}_b_ci'))}   "
        f"Δ(A−B) {100 * r['mean_diff']:+.1f}pp{_ci([r.get('diff_ci_low'), r.get('diff_ci_high')], signed=True)}"
        + (f"   (95% intervals: {r['interval_method']})" if r.get("interval_method") else ""),
        f"discordant pairs: b = {r['b']} (A right, B wrong), c = {r['c']} (A wrong, B right)"
        + (f"; right: F1 > {GRADED_RIGHT:g}" if m == "f1" else ""),
        f"McNemar p: exact {r['p_mcnemar_exact']:.3g} {stats.significance_stars(r['p_mcnemar_exact'])}   "
        f"χ² cc {r['p_mcnemar_chi2_cc']:.3g}",
    ]
    if r.get("no_ci_reason"):
        lines.append(f"paired bootstrap: no CI shown: {r['no_ci_reason']}")
    else:
        lines.append(f"paired bootstrap ({r['n_resamples']} resamples, seed {r['seed']}): Δ 95% CI "
                     f"[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]pp, p = {r['p_bootstrap']:.3g}")
    return "\n".join(lines)
