"""Numbers that mean what the paper's mean: EM as the authors compute it (and Section
5.4's literal reading beside it), the evaluated
set of Appendix B, cell identity that tracks exactly what can change a number, and
the one routing rule seen from the command line."""

from __future__ import annotations

import json

import pytest

from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend, cli


def _key(*overrides: str) -> str:
    return cell_from_cfg(compose(list(overrides))).key


# --- cell identity ------------------------------------------------------------------------


def test_speed_and_placement_settings_do_not_change_a_cell_key():
    base = _key("strategy=nf")
    for runtime in ("backend.n_threads=1", "backend.batch_size=64", "results_dir=/elsewhere", "grid_name=g"):
        assert _key("strategy=nf", runtime).split("__")[-1] == base.split("__")[-1], runtime
    vllm = _key("strategy=nf", "backend=vllm")
    for runtime in ("backend.gpu_memory_utilization=0.5", "backend.tensor_parallel_size=4", "backend.enable_prefix_caching=false"):
        assert _key("strategy=nf", "backend=vllm", runtime) == vllm, runtime
    served = _key("strategy=nf", "backend=openai")  # each backend's own runtime-only settings
    for runtime in ("backend.timeout_s=5", "backend.retries=1", "backend.max_in_flight=2", "backend.base_url=http://elsewhere:9/v1"):
        assert _key("strategy=nf", "backend=openai", runtime) == served, runtime


def test_settings_that_change_numbers_change_the_key():
    base = _key("strategy=three_agent")
    for semantic in ("model.temperature=0.1", "generation.max_tokens=16", "strategy.top_k=3", "retriever.k=20",
                     "benchmark.calibration_split=disjoint", "seed=1", "limit=5", "backend.n_ctx=2048"):
        assert _key("strategy=three_agent", semantic) != base, semantic


def test_a_new_metric_version_moves_every_cell_key(monkeypatch):
    from madara_cli.core import metrics

    before = _key("strategy=nf")
    monkeypatch.setattr(metrics, "METRIC_VERSION", metrics.METRIC_VERSION + 1)
    assert _key("strategy=nf") != before


def test_editing_a_prompt_template_changes_the_affected_cells_keys(monkeypatch, tmp_path):
    import shutil

    from madara_cli.config.folders import config_dir

    mine = tmp_path / "prompts" / "mine"
    shutil.copytree(config_dir() / "prompts" / "madara", mine)
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    strategies = ("nf", "three_agent", "main_rag")
    shipped = {s: _key(f"strategy={s}") for s in strategies}
    before = {s: _key(f"strategy={s}", "prompts=mine") for s in strategies}
    assert before == shipped  # the same words under another name: the same cells
    (mine / "relevance_system.txt").write_text((mine / "relevance_system.txt").read_text() + " Be strict.\n")
    after = {s: _key(f"strategy={s}", "prompts=mine") for s in strategies}
    assert after["three_agent"] != before["three_agent"]  # it sends the relevance prompt
    assert after["nf"] == before["nf"] and after["main_rag"] == before["main_rag"]  # they send no assessor prompt
    (mine / "factoid_system.txt").write_text("Answer briefly.\n")
    assert all(_key(f"strategy={s}", "prompts=mine") != after[s] for s in strategies)  # every strategy generates


# --- EM and the evaluated set ---------------------------------------------------------------


def test_conflictqa_cell_reports_every_metric_on_the_whole_slice(shared_data, tmp_path):
    path = shared_data / "conflicts" / "conflictqa_popqa_llama2-7b_saber_shared.jsonl"
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    cfg = compose(["benchmark=conflictqa", f"benchmark.path={path}", "strategy=nf", f"results_dir={tmp_path}"])
    res = run_cell(cfg, EnginePool(factory=lambda cfg: FakeBackend()))
    m = res.metrics
    assert {"em", "em_strict", "f1", "contains"} <= set(m)
    # No benchmark.sample: the whole slice is evaluated, calibration queries included.
    from madara_cli.data.splits import load_all_examples

    assert m["n"] == len(load_all_examples(cfg.benchmark)) > 0 and m["n"] <= len(rows)
    assert m["evaluated_set"]["calibration_split"] == "nested"
    assert m["evaluated_set"]["calibration_in_evaluated"] == min(m["n"], int(cfg.benchmark.calibration))
    pred = json.loads((res.folder / "predictions.jsonl").read_text().splitlines()[0])
    assert {"em", "em_strict", "f1", "contains"} <= set(pred)
    disjoint = run_cell(compose([*map(str, ["benchmark=conflictqa", f"benchmark.path={path}", "strategy=nf", f"results_dir={tmp_path}",
                                            "benchmark.calibration=10", "benchmark.calibration_split=disjoint"])]),
                        EnginePool(factory=lambda cfg: FakeBackend()))
    assert disjoint.metrics["n"] == m["n"] - 10 and disjoint.metrics["evaluated_set"]["calibration_in_evaluated"] == 0


class GoldEchoBackend(FakeBackend):
    """Replies to each generator request with one gold alias of its question, dressed
    the way models dress answers (lead-ins, quotes, articles, case, brackets, a final
    period, a second line), or with a wrong word: every EM reading meets every case."""

    def __init__(self, gold: dict[str, tuple[str, ...]]):
        super().__init__()
        self.gold = gold

    @property
    def fingerprint(self) -> str:
        return "gold-echo"

    def chat(self, requests):
        from madara_cli.core.records import Completion

        dress = (lambda a: a, lambda a: f'Answer: "{a}".', lambda a: f"The {a}", lambda a: a.upper(), lambda a: f"{a}.",
                 lambda a: f"({a})", lambda a: a.replace(".", "").replace(",", ""), lambda a: "Nothing",
                 lambda a: f"{a} (in 1901)", lambda a: f"{a}\nBecause the documents say so.")
        out = []
        for r in requests:
            question = r.messages[-1].content.rsplit("Question: ", 1)[-1].rsplit("\nAnswer:", 1)[0]
            aliases = self.gold[question]
            text = dress[(len(out) + len(question)) % len(dress)](aliases[len(question) % len(aliases)])
            out.append(Completion(text=text, tokens_in=10, tokens_out=len(text) // 4, finish_reason="stop"))
        return out


def _squad(text: str) -> str:
    # SQuAD normalisation written out here, apart from madara_cli.core.metrics.
    import re
    import string

    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _lower_whitespace(text: str) -> str:
    return " ".join(text.lower().split())


def test_every_per_sample_em_is_the_squad_match_and_em_strict_the_literal_one(shared_data, tmp_path):
    from madara_cli.agents.generator import clean_answer
    from madara_cli.core.metrics import tidy_answer
    from madara_cli.data.splits import load_all_examples

    path = shared_data / "conflicts" / "conflictqa_popqa_llama2-7b_saber_shared.jsonl"
    cfg = compose(["benchmark=conflictqa", f"benchmark.path={path}", "strategy=nf", f"results_dir={tmp_path}"])
    gold = {ex.question: tuple(ex.answers) for ex in load_all_examples(cfg.benchmark)}
    res = run_cell(cfg, EnginePool(factory=lambda cfg: GoldEchoBackend(gold)))
    rows = [json.loads(x) for x in (res.folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == res.metrics["n"] > 20
    for row in rows:
        assert row["prediction"] == clean_answer(row["raw"])
        golds = [tidy_answer(a) for a in row["answers"]]
        assert row["em"] == int(any(_squad(row["prediction"]) == _squad(g) for g in golds)), row
        assert row["em_strict"] == int(any(_lower_whitespace(row["prediction"]) == _lower_whitespace(g) for g in golds)), row
    pairs = {(r["em"], r["em_strict"]) for r in rows}
    assert {(1, 1), (1, 0), (0, 0)} <= pairs and (0, 1) not in pairs  # the slice meets every case; strict implies SQuAD
    assert res.metrics["em"] == pytest.approx(sum(r["em"] for r in rows) / len(rows))
    assert res.metrics["em_strict"] == pytest.approx(sum(r["em_strict"] for r in rows) / len(rows))


def test_tables_render_any_metric_and_footnote_the_split(tmp_path):
    from madara_cli.tables import write_tables

    cfg = compose(["strategy=nf", "limit=3", f"results_dir={tmp_path}"])
    run_cell(cfg, EnginePool(factory=lambda cfg: FakeBackend()))
    for metric in ("em", "em_strict", "f1", "contains"):
        (md,) = write_tables(tmp_path, tmp_path / metric, only=["table1"], formats=("md",), metric=metric)
        text = md.read_text()
        assert "calibration_split=nested" in text
        # Every table says which metric its numbers are, EM's reading included.
        assert f"--metric {metric}`" in text if metric != "em" else "EM as the authors' code computes it" in text
    # The name results before METRIC_VERSION 3 used still works, as em.
    (old,) = write_tables(tmp_path, tmp_path / "old", only=["table1"], formats=("md",), metric="em_squad")
    assert old.read_text() == (tmp_path / "em" / "table1.md").read_text()
    with pytest.raises(ValueError, match="valid: em, em_strict, f1, contains"):
        write_tables(tmp_path, tmp_path / "x", metric="accuracy")


# --- one routing rule ---------------------------------------------------------------------


def test_route_published_reproduces_table2_from_the_command_line():
    r = cli("route", "--published", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    assert "10/10 of Table 2's routes reproduced" in r.stdout
    lines = r.stdout.splitlines()  # one line per pair and one per route's rule, within 100 columns
    assert max(len(ln) for ln in lines) <= 100 and len(lines) <= 40
    assert any(ln.split()[:3] == ["llama-3.1-8b", "conflicts", "13.9"] for ln in lines)
    assert "  qwen3-8b × conflicts: ρ* = -0.50 > -1 (stochastic scoring) → score distribution alignment (SDA)" in lines
    bad = cli("tables", "--metric", "accuracy")
    assert bad.returncode == 2 and "valid: em, em_strict, f1, contains" in bad.stderr
