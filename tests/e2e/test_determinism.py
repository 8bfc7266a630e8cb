"""Two runs of one seed in two fresh folders give byte-identical predictions, tables
and metrics apart from the ``timing`` section of metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from madara_cli.tables import write_tables
from tests.fakes import FakeBackend, cli

STRATEGIES = ("nf", "three_agent", "pde", "pde_random", "atf")


def _without_timing(path: Path) -> str:
    """metrics.json up to its run-dependent tail: provenance (versions, host, start/end),
    then timing, the last two sections."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert list(data)[-2:] == ["provenance", "timing"], "provenance then timing must close metrics.json"
    assert set(data["timing"]) >= {"wall_seconds", "engine_seconds", "engine_seconds_by_stage"}
    head = text[: text.rindex('"provenance"')]
    assert "seconds" not in head, "no timing may leak outside the timing section"
    return head


def _run_all(results: Path) -> None:
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        for s in STRATEGIES:
            run_cell(compose([f"strategy={s}", "limit=4", "seed=3", f"results_dir={results}", "grid_name=demo"]), pool)
    write_tables(results, results / "tables", formats=("md", "csv", "tex"))


def _files(results: Path, pattern: str) -> dict[str, Path]:
    return {str(p.relative_to(results)): p for p in sorted(results.glob(pattern))}


def test_two_fresh_runs_are_byte_identical_apart_from_timing(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _run_all(a)
    _run_all(b)
    for pattern in ("demo/*/predictions.jsonl", "tables/*.md", "tables/*.csv", "tables/*.tex"):
        fa, fb = _files(a, pattern), _files(b, pattern)
        assert fa and list(fa) == list(fb), pattern
        for name in fa:
            assert fa[name].read_bytes() == fb[name].read_bytes(), name
    ma, mb = _files(a, "demo/*/metrics.json"), _files(b, "demo/*/metrics.json")
    assert len(ma) == len(STRATEGIES) and list(ma) == list(mb)
    for name in ma:
        assert _without_timing(ma[name]) == _without_timing(mb[name]), name


def test_a_different_seed_changes_the_predictions(tmp_path):
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        r0 = run_cell(compose(["strategy=pde_random", "limit=4", "seed=0", f"results_dir={tmp_path}"]), pool)
        r1 = run_cell(compose(["strategy=pde_random", "limit=4", "seed=1", f"results_dir={tmp_path}"]), pool)
    assert (r0.folder / "predictions.jsonl").read_bytes() != (r1.folder / "predictions.jsonl").read_bytes()


@pytest.mark.llm
def test_real_engine_runs_are_byte_identical(tmp_path):
    heads, preds = [], []
    for name in ("a", "b"):
        r = cli("run", "strategy=nf", "limit=3", "backend.n_threads=1", f"results_dir={tmp_path / name}")
        assert r.returncode == 0, r.stderr
        (m,) = list((tmp_path / name).glob("adhoc/*/metrics.json"))
        heads.append(_without_timing(m))
        preds.append((m.parent / "predictions.jsonl").read_bytes())
    assert heads[0] == heads[1] and preds[0] == preds[1]
