"""The verbs of the ``madara`` command line, one module per verb or small family of
verbs. Nothing here imports :mod:`madara_cli.cli`: it registers these functions on
its one Typer app, in the order ``madara --help`` lists them."""
