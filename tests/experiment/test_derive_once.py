"""Derived once, passed down: a cell's key is computed once per run, and a cell composes
no config in the middle of its run beyond the documented steps (the reranker model's
config at the start of the cell, the routed strategy's node once the probe routes)."""

from __future__ import annotations

import pytest

import madara_cli.composition as composition
from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend

MADARA = ["strategy=madara", "benchmark.calibration=6", "rsc.rescoring=logprob", "rsc.bootstrap=50", "limit=3"]


@pytest.fixture
def composes(monkeypatch):
    """The override lists of every compose() a run makes (the library imports compose
    from madara_cli.composition where it needs it)."""
    seen: list[list[str]] = []
    real = composition.compose

    def spy(overrides=None):
        seen.append(list(overrides or []))
        return real(overrides)

    monkeypatch.setattr(composition, "compose", spy)
    return seen


@pytest.fixture
def keys(monkeypatch):
    """How many times a cell's identity is derived (config.identity's one rule call)."""
    from madara_cli.config import identity as identify

    count = [0]
    real = identify.cell_identity

    def spy(*a, **k):
        count[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(identify, "cell_identity", spy)
    return count


def test_a_cell_key_is_derived_once_per_run(tmp_path, keys):
    cfg = compose(["strategy=nf", "limit=3", f"results_dir={tmp_path}"])
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        first = run_cell(cfg, pool)
        assert keys[0] == 1 and not first.skipped
        again = run_cell(cfg, pool)
    assert keys[0] == 2 and again.skipped and again.cell.key == first.cell.key


def test_a_madara_cell_composes_its_own_node_and_the_routed_one_once(tmp_path, composes):
    cfg = compose([*MADARA, f"results_dir={tmp_path}"])
    composes.clear()
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        result = run_cell(cfg, pool)
    route = result.metrics["madara"]["route"]
    assert composes == [["strategy=madara"], [*MADARA[1:], f"results_dir={tmp_path}", f"strategy={route}"]]


def test_the_reranker_model_config_is_composed_once_for_eval_and_calibration(tmp_path, composes):
    rerank = ["retriever=rerank", "retriever.model=qwen3-0.6b"]
    cfg = compose([*MADARA, f"results_dir={tmp_path}", *rerank])
    composes.clear()
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        run_cell(cfg, pool)  # retrieves the evaluated queries and the probe's calibration split
    assert [c for c in composes if c[0].startswith("model=")] == [["model=qwen3-0.6b", "backend=llamacpp", "seed=0"]]
