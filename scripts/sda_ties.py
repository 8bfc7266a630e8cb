"""How often SDA's top-5 set depends on how tied scores are ranked
(``strategy.rank_ties=ordinal`` vs ``average``), side by side in one run.

Algorithm 1 ranks each agent's scores, ``rank(s_j) / (m - 1)``, without saying what
happens to ties; the authors' code takes ``argsort(argsort(s_j))`` (ordinal ranks),
madara used average ranks. With the paper's integer 0-5 scores (``generate`` mode) ties
are the rule, so the two readings can keep different documents.

Prints, for each source of score matrices, the share of queries whose top-5 set
differs between the two readings, and between ordinal ranks taken with a stable sort
and with numpy's default (unstable) sort on this machine -- the latter is what the
authors' code does literally, and it need not be the same from one numpy build or CPU
to the next:

* ``random``: integer 0-5 scores, uniform, of the paper's shape (10 documents x 3
  agents), ``--n`` matrices from ``--seed``;
* ``results``: every score matrix in the ``predictions.jsonl`` of the finished cells
  under ``--results`` (``scores`` of 3-Agent, SDA, ATF, RRF, PDE cells), each matrix
  once, failed scores imputed as SDA imputes them (the count of such queries is shown), discrete ones (generate mode: integer scores, adjustments on multiples of 1.25)
  and the rest (logprob mode's expected digits) apart.

Usage:  python scripts/sda_ties.py [--n 20000] [--seed 0] [--results results] [--k 5]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from madara_cli.agents.matrix import impute
from madara_cli.strategies.selection import sda_rank, top_k


def _numpy_default_ordinal(scores: np.ndarray) -> np.ndarray:
    """The authors' literal ranking: argsort of argsort with numpy's default sort."""
    m = scores.shape[0]
    ranks = np.column_stack([np.argsort(np.argsort(scores[:, j])) for j in range(scores.shape[1])])
    return ranks.mean(axis=1) / (m - 1) * 5.0


def shares(mats: list[np.ndarray], k: int) -> dict[str, float | int]:
    avg_vs_ord = stable_vs_default = ties = 0
    failed = 0
    for s in mats:
        ordinal = set(top_k(sda_rank(s, ties="ordinal"), k))
        failed += bool(np.isnan(s).any())
        s = impute(s)  # what SDA ranks
        ties += any(len(np.unique(s[:, j])) < s.shape[0] for j in range(s.shape[1]))
        avg_vs_ord += set(top_k(sda_rank(s, ties="average"), k)) != ordinal
        stable_vs_default += set(top_k(_numpy_default_ordinal(s), k)) != ordinal
    n = len(mats)
    return {
        "queries": n,
        "with_failed_scores": failed,
        "with_ties": ties / n if n else float("nan"),
        "top5_average_vs_ordinal": avg_vs_ord / n if n else float("nan"),
        "top5_ordinal_stable_vs_numpy_default": stable_vs_default / n if n else float("nan"),
    }


def random_matrices(n: int, seed: int, m: int = 10, agents: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return list(rng.integers(0, 6, size=(n, m, agents)).astype(float))


def result_matrices(results: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(discrete, other) complete score matrices of the finished cells under
    ``results``, each distinct matrix once (strategies sharing scores repeat them)."""
    seen: set[bytes] = set()
    ints: list[np.ndarray] = []
    other: list[np.ndarray] = []
    for path in sorted(results.rglob("predictions.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                scores = json.loads(line).get("extra", {}).get("scores")
            except (ValueError, AttributeError):
                continue
            if not scores or len(scores) < 2:
                continue
            # Failed scores (null) become NaN, which sda_rank imputes as the strategy does.
            s = np.array([[np.nan if v is None else v for v in row] for row in scores], dtype=float)
            if s.ndim != 2 or s.tobytes() in seen:
                continue
            seen.add(s.tobytes())
            # generate mode: integers, and the Conflict Detector's -2..+2 mapped to multiples of 1.25
            finite = s[np.isfinite(s)]
            (ints if np.allclose(finite * 4, np.round(finite * 4)) else other).append(s)
    return ints, other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="random matrices")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=5, help="documents kept (paper: top-5 of 10)")
    ap.add_argument("--results", type=Path, default=Path("results"), help="results folder to read real score matrices from")
    args = ap.parse_args()

    rows = [("random 0-5 integers, 10 docs x 3 agents", shares(random_matrices(args.n, args.seed), args.k))]
    if args.results.is_dir():
        ints, other = result_matrices(args.results)
        rows.append((f"{args.results}: discrete (generate) matrices", shares(ints, args.k)))
        rows.append((f"{args.results}: other (logprob) matrices", shares(other, args.k)))
    else:
        print(f"(no results folder at {args.results}: real matrices skipped)")
    print(f"top-{args.k} set changes, share of queries (numpy {np.__version__})")
    print(f"{'source':50} {'queries':>8} {'w/ failed':>9} {'with ties':>10} {'avg vs ord':>11} {'ord: stable vs numpy':>21}")
    for name, r in rows:
        fmt = (lambda v: f"{v:.1%}") if r["queries"] else (lambda v: "—")
        print(f"{name:50} {r['queries']:>8} {r['with_failed_scores']:>9} {fmt(r['with_ties']):>10} {fmt(r['top5_average_vs_ordinal']):>11} "
              f"{fmt(r['top5_ordinal_stable_vs_numpy_default']):>21}")


if __name__ == "__main__":
    main()
