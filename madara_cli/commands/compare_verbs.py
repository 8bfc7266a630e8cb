"""``madara compare``: a paired comparison of two finished cells."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from madara_cli.commands.options import UserError, out, results_dir_of, results_option


def _cell_folder(given: str, results: Optional[Path]) -> Path:
    """A cell folder as given, else the finished cell whose key (a unique part of it is
    enough) names it under the results folder, as ``madara show`` finds one."""
    path = Path(given)
    if path.is_dir():
        return path
    from madara_cli.results.record_files import find_cell

    return find_cell(results_dir_of(results), given)


def compare(
    run_a: Optional[str] = typer.Argument(None, help="A finished cell: its folder (results/<grid>/<key>) or its key (a unique part is enough)"),
    run_b: Optional[str] = typer.Argument(None, help="Another finished cell: folder or key"),
    results: Optional[Path] = results_option(),
    resamples: int = typer.Option(10_000, "--resamples", min=1, help="Paired bootstrap resamples"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object"),
    min_pairs: int = typer.Option(10, "--min-pairs", min=1, help="Fewest shared examples for which a bootstrap CI is shown (below it: the exact McNemar test only)"),
    metric: str = typer.Option("em", "--metric", help="What to compare: em | em_strict | f1 | contains (per query, from the cells' predictions)"),
) -> None:
    """Paired comparison of two cells on their shared examples: the metric (EM by default), Δ = A − B (positive: A
    scores higher), b, c, McNemar, bootstrap CI; a degraded cell is marked ◊ with its cause.
    Cells of different benchmarks or questions, or with an id twice, are refused."""
    from madara_cli.tables import compare_cells, format_comparison

    if not run_a or not run_b:
        raise UserError("name two finished cells A and B (keys, unique parts of them, or folders); madara ls cells lists them")
    try:
        result = compare_cells(_cell_folder(run_a, results), _cell_folder(run_b, results), n_resamples=resamples, seed=seed, min_pairs=min_pairs,
                               metric=metric)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        import json

        print(json.dumps(result, indent=2, allow_nan=False))
        return
    out.print(format_comparison(result), markup=False, highlight=False, soft_wrap=True)
