"""The package's layer order, written once: a layer imports only from earlier layers (and, without
a circle, its own). Entries name modules or packages below ``madara_cli`` ("config": all of
``madara_cli.config``); a module belongs to the longest entry naming it or a parent, and
``madara_cli/__init__.py`` to the core. ``tests/core/test_layers.py`` reads every import (in
functions and ``import_module("...")`` strings too) and fails on a later layer, a circle or two
modules sharing a file name. Unread at run time: it sits here so a change adding a module places it.
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
