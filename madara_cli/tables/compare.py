"""Paired comparison of two finished cells: McNemar on discordant pairs and a paired bootstrap.

The paper compares methods query by query (Appendix G.3: McNemar's test on the
discordant pairs b, c; Table 6: a paired bootstrap over queries). ``compare_cells``
does both for any two result folders, pairing on the example ids they share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from madara_cli import stats
from madara_cli.results.store import read_predictions


def paired_outcomes(
    preds_a: tuple[dict[str, Any], ...], preds_b: tuple[dict[str, Any], ...], metric: str = "em"
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Shared ids (in A's order) and the two metric vectors aligned on them."""
    by_id_b = {str(p["id"]): p for p in preds_b}
    ids = [str(p["id"]) for p in preds_a if str(p["id"]) in by_id_b]
    by_id_a = {str(p["id"]): p for p in preds_a}
    a = np.array([float(by_id_a[i].get(metric, 0) or 0) for i in ids])
    b = np.array([float(by_id_b[i].get(metric, 0) or 0) for i in ids])
    return ids, a, b


def compare_cells(dir_a: Path, dir_b: Path, n_resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Compare cell A against cell B on their shared example ids.

    Returns n, EM of each (fractions), the discordant counts b (A right, B wrong) and c
    (A wrong, B right), McNemar p-values (exact binomial and χ² with continuity
    correction) and a seeded paired bootstrap of mean EM(A) − EM(B) with its 95% CI and
    two-sided p. Raises ValueError when a folder has no predictions or no ids are shared.
    """
    preds_a, preds_b = read_predictions(Path(dir_a)), read_predictions(Path(dir_b))
    ids, em_a, em_b = paired_outcomes(preds_a, preds_b, "em")
    if not ids:
        raise ValueError(f"{dir_a} and {dir_b} share no example ids: were they run on the same benchmark and limit?")
    b, c = stats.discordant(em_a > 0.5, em_b > 0.5)
    boot = stats.paired_bootstrap(em_a, em_b, n_resamples=n_resamples, seed=seed)
    return {
        "dir_a": str(dir_a),
        "dir_b": str(dir_b),
        "n": len(ids),
        "only_in_a": len(preds_a) - len(ids),
        "only_in_b": len(preds_b) - len(ids),
        "em_a": float(em_a.mean()),
        "em_b": float(em_b.mean()),
        "b": b,
        "c": c,
        "p_mcnemar_exact": stats.mcnemar(b, c, "exact"),
        "p_mcnemar_chi2_cc": stats.mcnemar(b, c, "chi2-cc"),
        "mean_diff": boot.mean_diff,
        "ci_low": boot.ci_low,
        "ci_high": boot.ci_high,
        "p_bootstrap": boot.p_value,
        "n_resamples": n_resamples,
        "seed": seed,
    }


def format_comparison(result: dict[str, Any]) -> str:
    """Human-readable summary of :func:`compare_cells` (EM in %)."""
    r = result
    lines = [
        f"A: {r['dir_a']}",
        f"B: {r['dir_b']}",
        f"paired on {r['n']} shared ids (only in A: {r['only_in_a']}, only in B: {r['only_in_b']})",
        f"EM  A {100 * r['em_a']:.1f}%   B {100 * r['em_b']:.1f}%   Δ {100 * r['mean_diff']:+.1f}pp",
        f"discordant pairs: b = {r['b']} (A right, B wrong), c = {r['c']} (A wrong, B right)",
        f"McNemar p: exact {r['p_mcnemar_exact']:.3g} {stats.significance_stars(r['p_mcnemar_exact'])}   "
        f"χ² cc {r['p_mcnemar_chi2_cc']:.3g}",
        f"paired bootstrap ({r['n_resamples']} resamples, seed {r['seed']}): Δ 95% CI "
        f"[{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]pp, p = {r['p_bootstrap']:.3g}",
    ]
    return "\n".join(lines)
