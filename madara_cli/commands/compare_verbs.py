"""``madara compare``: a paired comparison of two finished cells."""

from __future__ import annotations

from pathlib import Path

import typer

from madara_cli.commands.options import UserError, out


def compare(
    run_a: Path = typer.Argument(..., help="A finished cell folder (results/<grid>/<key>)"),
    run_b: Path = typer.Argument(..., help="Another finished cell folder"),
    resamples: int = typer.Option(10_000, "--resamples", min=1, help="Paired bootstrap resamples"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object"),
    min_pairs: int = typer.Option(10, "--min-pairs", min=1, help="Fewest shared examples for which a bootstrap CI is shown (below it: the exact McNemar test only)"),
) -> None:
    """Paired comparison of two cells on their shared examples: EM, b, c, McNemar, bootstrap CI.
    Cells of different benchmarks or questions, or with an id twice, are refused."""
    from madara_cli.tables import compare_cells, format_comparison

    try:
        result = compare_cells(run_a, run_b, n_resamples=resamples, seed=seed, min_pairs=min_pairs)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        import json

        print(json.dumps(result, indent=2, allow_nan=False))
        return
    out.print(format_comparison(result), markup=False, highlight=False)
