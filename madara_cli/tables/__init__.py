"""Paper tables from results on disk: ``lookup``, ``pairs`` (formatting), ``declare`` (``@table``),
``builders/`` (``TABLES``), ``render``, ``figure``, ``plots``, ``report``, ``compare``; the
paper's own numbers are :mod:`madara_cli.paper`. Entry points (the CLI verbs call these):

- ``write_tables(results_dir, out_dir, only=None, formats=("md", "tex", "csv"))`` — ``madara tables``
- ``compare_cells(dir_a, dir_b, n_resamples=10_000, seed=0)`` / ``format_comparison`` — ``madara compare``
- ``figure2(results_dir, out_dir=None)`` — Figure 2 violins (``figure.write_figure2``: every probed benchmark)
- ``plots.write_plots(results_dir, out_dir=None, formats=("png", "pdf"))`` — ``madara plot``
- ``report.write_report(results_dir, out_dir=None)`` — ``madara report`` (one HTML page)
"""

from madara_cli.tables.builders import TABLES, build_table
from madara_cli.tables.compare import compare_cells, format_comparison
from madara_cli.tables.figure import figure2
from madara_cli.tables.lookup import load_results
from madara_cli.tables.render import FORMATS, write_tables

__all__ = [
    "FORMATS",
    "TABLES",
    "build_table",
    "compare_cells",
    "figure2",
    "format_comparison",
    "load_results",
    "write_tables",
]
