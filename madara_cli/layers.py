"""The layer order of the package, written once: each layer may import only from the
layers before it (and, without a circle, from modules of its own layer).

Every entry is a module or package name below ``madara_cli`` ("config" stands for
``madara_cli.config`` and all of its modules). A module belongs to the layer of the
longest entry that names it or one of its parents; ``madara_cli/__init__.py`` itself
belongs to the core. ``tests/test_layers.py`` reads every import of every module in
the package (those inside functions and ``import_module("...")`` strings too) and fails
when one points to a later layer, when the imports make a circle, or when two modules
share a file name.

Nothing in the package reads this at run time; it is here, beside the code it orders,
so that a new module or package is placed in the order by the change that adds it.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # core: plain records, numbers, errors and the small shared services (one room); the
    # paper's published numbers beside it
    ("core", "paper", "layers"),
    # the one catalog of plug-ins and the one spec shape
    ("plugins",),
    # settings: schemas, config folders, prompt sets, the identity room
    ("config",),
    # composing a run's config (it names the shipped plug-ins as strings, so it sits below
    # them); where examples and completions come from
    ("composition", "data", "backends", "retrievers"),
    # the agents' prompts and scoring; the typed results on disk
    ("agents", "results"),
    # the document-assessment strategies
    ("strategies",),
    # the Diagnose arm: RSC probe and router
    ("diagnose",),
    # reading finished results into paper tables; the paper checked against itself;
    # running grids of cells
    ("tables", "audit", "experiment"),
    # the Python API (the verbs call it), and beside it the developer's measurements
    ("api", "bench"),
    # the verbs
    ("commands",),
    # the front door
    ("cli",),
)
