"""strategy=madara through experiment/treat.py: probe -> route -> the routed strategy from
the registry, its config composed by Hydra; one walk (prepare_cell, prepare_probe) for run, plan and probe;
strategies/ never imports the experiment or the probe."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.examples import load_cell, prepare_probe, retrieve_for
from madara_cli.experiment.runner import run_cell
from madara_cli.experiment.treat import Treatment, routed_config
from madara_cli.experiment.walk import prepare_cell
from madara_cli.results import record_files
from tests.conftest import ROOT
from tests.fakes import FakeBackend

MADARA = ["strategy=madara", "benchmark.calibration=6", "rsc.rescoring=logprob", "rsc.bootstrap=50"]
FORBIDDEN = ("madara_cli.experiment", "madara_cli.diagnose.probe")


def _imports(path: Path) -> set[str]:
    """Every module a file imports, absolute names (``from madara_cli.diagnose import probe``
    counts as ``madara_cli.diagnose.probe``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the strategies package
                base = ".".join(["madara_cli", "strategies"][: 3 - node.level] + ([base] if base else []))
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def test_strategies_import_neither_the_experiment_nor_the_probe():
    files = sorted((ROOT / "madara_cli" / "strategies").glob("*.py"))
    assert len(files) >= 8
    bad = {f.name: sorted(m for m in _imports(f) if any(m == x or m.startswith(x + ".") for x in FORBIDDEN)) for f in files}
    assert not {k: v for k, v in bad.items() if v}, "strategies/ must not call up the stack"


def test_the_import_check_catches_each_form(tmp_path):
    for line in ("from madara_cli.diagnose.probe import find_or_run_probe", "from madara_cli.diagnose import probe",
                 "import madara_cli.experiment.runner", "from ..experiment import treat"):
        f = tmp_path / "x.py"
        f.write_text(f"def f():\n    {line}\n")
        assert any(m.startswith(FORBIDDEN) for m in _imports(f)), line


def test_a_madara_cell_derives_its_probe_spec_once(tmp_path, monkeypatch):
    from madara_cli.config import identity as identify

    calls = []
    original = identify.probe_identity
    monkeypatch.setattr(identify, "probe_identity", lambda *a, **k: calls.append(a) or original(*a, **k))
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        result = run_cell(compose([*MADARA, "limit=4", f"results_dir={tmp_path}"]), pool)
    assert len(calls) == 1 and result.metrics["madara"]["probe_reused"] is False
    assert (tmp_path / result.metrics["madara"]["probe"]).is_file()


def test_madara_cell_probes_routes_and_then_reuses_the_probe(tmp_path):
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        first = run_cell(compose([*MADARA, "limit=4", f"results_dir={tmp_path}"]), pool)
        again = run_cell(compose([*MADARA, "limit=5", f"results_dir={tmp_path}"]), pool)
    (probe,) = tmp_path.glob("probes/*/probe.json")
    record = record_files.read_probe(probe).to_dict()
    m1, m2 = first.metrics["madara"], again.metrics["madara"]
    assert m1 == {
        "route": record["route"], "reason": record["reason"], "probe": str(probe.relative_to(tmp_path)), "probe_reused": False,
        "em_nf_calibration": record["em_nf"], "rsc_class": record["rsc_class"], "rho": record["rho"],
    }
    assert m2 == {**m1, "probe_reused": True}
    # The probe run for the first cell is part of its cost; the second only reads it.
    assert "rsc-cot" in first.metrics["accounting"]["by_stage"] and "rsc-cot" not in again.metrics["accounting"]["by_stage"]
    rows = [json.loads(x) for x in (first.folder / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["extra"]["route"] == record["route"] for r in rows)
    assert first.metrics["cell"]["strategy"] == "madara"


def test_a_pinned_probe_routes_without_probing(tmp_path):
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        run_cell(compose([*MADARA, "limit=3", f"results_dir={tmp_path / 'a'}"]), pool)
        (probe,) = (tmp_path / "a").glob("probes/*/probe.json")
        pinned = record_files.write_probe(tmp_path / "pinned", replace(record_files.read_probe(probe), route="sda"))
        res = run_cell(compose([*MADARA, "limit=3", f"strategy.probe={pinned}", f"results_dir={tmp_path / 'b'}"]), pool)
    assert res.metrics["madara"]["route"] == "sda" and res.metrics["madara"]["probe"] == str(pinned) and res.metrics["madara"]["probe_reused"]
    assert not (tmp_path / "b" / "probes").exists() and "rsc-cot" not in res.metrics["accounting"]["by_stage"]


def test_routed_config_is_the_composed_routed_strategy_plus_what_the_user_set(tmp_path):
    cfg = compose(["strategy=madara", "strategy.top_k=3", "strategy.scoring=logprob", "limit=7", f"results_dir={tmp_path}"])
    sda = routed_config(cfg, "sda")
    assert sda.strategy == compose(["strategy=sda", "strategy.top_k=3", "strategy.scoring=logprob"]).strategy
    assert sda.limit == 7 and sda.results_dir == str(tmp_path) and sda.benchmark == cfg.benchmark
    # CoT treatments generate their reasoning: scoring does not carry, top_k does.
    cot = routed_config(cfg, "cot")
    assert cot.strategy == compose(["strategy=cot", "strategy.top_k=3"]).strategy and cot.strategy.scoring == "generate"
    # Nothing set by the user: exactly the routed strategy's own config.
    assert routed_config(compose(["strategy=madara"]), "atf").strategy == compose(["strategy=atf"]).strategy


def test_a_setting_given_without_an_override_still_carries():

    cfg = compose(["strategy=madara"]).merged({"strategy": {"top_k": 4}})
    assert routed_config(cfg, "pde").strategy.top_k == 4


@pytest.mark.parametrize("split", ["nested", "disjoint"])
def test_the_probe_sees_the_same_calibration_queries_from_the_cell_load(tmp_path, split):
    cfg = compose([*MADARA, "limit=3", f"benchmark.calibration_split={split}", f"results_dir={tmp_path}"])
    own = prepare_probe(cfg, None, force=True).examples
    from_cell = Treatment.prepare(cfg, None, load_cell(cfg).calibration).calibration
    assert [e.id for e in own] == [e.id for e in from_cell] and len(own) == 6
    assert [[d.id for d in e.docs] for e in own] == [[d.id for d in e.docs] for e in from_cell]
    evaluated = prepare_cell(cfg, None, force=True).examples
    assert len(evaluated) == 3
    inside = {e.id for e in own} & {e.id for e in evaluated}
    assert bool(inside) == (split == "nested")


class _Pool:
    """Records which model each engine was asked for; every engine judges relevance."""

    def __init__(self):
        from tests.fakes import RelevanceJudge

        self.asked: list[str] = []
        self._judge = RelevanceJudge()

    def get(self, cfg):
        self.asked.append(str(cfg.model.name))
        return self._judge


@pytest.mark.parametrize("reranker", [None, "qwen3-0.6b"])
def test_run_and_probe_rerank_with_the_same_engine(shared_data, tmp_path, reranker):
    path = shared_data / "musique" / "musique_ans_migres_shared.jsonl"
    over = ["benchmark=musique", f"benchmark.path={path}", "retriever=rerank", "retriever.candidates=4", "retriever.k=3",
            "benchmark.calibration=3", "limit=2", f"results_dir={tmp_path}", *([f"retriever.model={reranker}"] if reranker else [])]
    want = reranker or compose(over).model.name
    for cfg in (compose(over), compose([*over, *MADARA[:1]])):
        pool = _Pool()
        retrieve_for(cfg, load_cell(cfg).examples, pool)
        assert pool.asked == [want]
    pool = _Pool()
    Treatment.prepare(compose([*over, *MADARA[:1]]), pool)
    assert pool.asked == [want]  # the probe's calibration split: the run's reranker, not the probed model
