"""Figure 2: per-query Spearman ρ distributions on CONFLICTS, one violin per model and perturbation level.

Reads ``per_query.values`` (three lists of per-query ρ, one per level) from each probe's
record (paper Appendix F.2). Violins are green for quality-ordered probes
(ρ* = −1.0) and red otherwise, with the mean written under each violin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from madara_cli.tables import paper_values as pv
from madara_cli.tables.index import load_results

LEVELS = ("Shuffled", "Contra.", "Random")


def figure2(results_dir: Path, out_dir: Path | None = None, benchmark: str = "conflicts") -> Path | None:
    """Draw Figure 2 to ``out_dir/figure2.png`` (default ``results_dir/figures``); None when no probe has per-query values."""
    results = load_results(results_dir)
    order = {m: i for i, m in enumerate(pv.MODEL_LABELS)}
    models = sorted({p.model for p in results.probes if p.benchmark == benchmark}, key=lambda m: (order.get(m, len(order)), m))
    probes = [results.probe(m, benchmark) for m in models]
    panels = []
    for probe in probes:
        values = probe.per_query_values()
        levels = [np.asarray([v for v in level if v is not None], dtype=float) for level in values[:3]]
        levels = [lvl[np.isfinite(lvl)] for lvl in levels]
        if len(levels) == 3 and all(lvl.size for lvl in levels):
            panels.append((probe, levels))
    if not panels:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # matplotlib is the plots extra
        import logging

        logging.getLogger(__name__).warning("Figure 2 skipped: it needs matplotlib (pip install 'madara[plots]')")
        return None

    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), sharey=True, squeeze=False)
    for ax, (probe, levels) in zip(axes[0], panels, strict=True):
        quality_ordered = probe.rsc_class == "quality-ordered"
        colour = "#2e7d32" if quality_ordered else "#c62828"
        parts = ax.violinplot(levels, showmedians=True, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(colour)
            body.set_alpha(0.35)
        parts["cmedians"].set_color(colour)
        for i, level in enumerate(levels, start=1):
            ax.text(i, -1.22, f"{level.mean():+.2f}", ha="center", va="top", fontsize=8)
        ax.set_xticks([1, 2, 3], LEVELS, fontsize=8)
        ax.set_ylim(-1.35, 1.05)
        ax.axhline(0, color="grey", lw=0.5, ls=":")
        ax.set_title(
            f"{pv.MODEL_LABELS.get(probe.model, probe.model)}\n{pv.CLASS_LABELS.get(probe.rsc_class, '?')}", fontsize=9
        )
        for spine in ax.spines.values():
            spine.set_edgecolor(colour)
    axes[0][0].set_ylabel("per-query Spearman ρ")
    fig.suptitle(f"Per-query Spearman ρ on {pv.BENCHMARK_LABELS.get(benchmark, benchmark)} (numbers: means)", fontsize=10)
    fig.tight_layout()
    out = Path(out_dir) if out_dir is not None else Path(results_dir) / "figures"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "figure2.png"
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
