"""Shared fixtures: the shared data slices (read in place), a temp results folder,
and skipping of tests whose optional engine is absent."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MADARA_SHARED_DATA") or ROOT.parent / "shared" / "data")  # env: for a checkout elsewhere


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def pytest_collection_modifyitems(config, items):
    if not have("llama_cpp"):
        skip = pytest.mark.skip(reason="llama-cpp-python not installed (pip install -e '.[cpu]')")
        for item in items:
            if "llm" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark slices not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"


def configs_with_grid(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """A copy of configs/ with one extra grid; returns the env that points madara at it."""
    import shutil

    configs = tmp_path / "configs"
    if not configs.exists():
        shutil.copytree(ROOT / "configs", configs)
    (configs / "grid" / f"{name}.yaml").write_text(f"name: {name}\n{body}")
    return {"MADARA_CONFIGS": str(configs)}


def grid_outcome(results: Path, grid: str = "pair") -> dict[str, tuple]:
    """Each finished cell of ``grid`` under ``results``: (em, f1, n, raw predictions),
    by folder name, to compare a launcher's run with a serial one."""
    from madara_cli.results import store

    cells = {}
    for folder in sorted((results / grid).glob("*/")):
        record = store.read_cell(folder)
        if record is not None:
            cells[folder.name] = (record.em, record.f1, record.n, [p["raw"] for p in store.read_predictions(folder)])
    return cells


@pytest.fixture(autouse=True, scope="session")
def _plugins_loaded():
    """Tests compose configs directly, as the CLI does after loading the plugins (the
    shipped backends, retrievers and strategies register their schemas on import)."""
    from madara_cli.experiment.plugins import load_plugins

    load_plugins()
