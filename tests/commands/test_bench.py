"""`madara bench`: every section runs end to end and writes its JSON; those that load
the model, or plan the grid (which fingerprints the model file), are marked ``llm``. No timed assertions:
the figures are what the command reports, not what the tests require."""

from __future__ import annotations

import json

import pytest

from madara_cli.bench import BenchOptions, physical_cores, run_bench, summary_rows
from madara_cli.core.errors import ConfigError


@pytest.mark.llm  # the calls section plans the grid, which fingerprints the SmolLM2 GGUF file
def test_calls_and_stats_sections_write_json(tmp_path):
    opts = BenchOptions(limit=2, stat_queries=200, stat_resamples=500, out_dir=tmp_path / "bench")
    res = run_bench(opts, ("calls", "stats"), say=lambda m: None)
    for name in ("calls", "stats", "summary"):
        assert json.loads((tmp_path / "bench" / f"{name}.json").read_text())
    c = res["calls"]
    # The shared cache makes the unique calls fewer than the strategies' own requests.
    assert 0 < c["unique_calls"] < c["sum_own_requests"]
    assert c["ratio_unique_vs_own_requests"] == pytest.approx(c["unique_calls"] / c["sum_own_requests"], abs=1e-3)
    assert c["by_strategy"]["nf"] == {"requests": 2, "new_unique_calls": 2, "paper_calls": 2, "scoring_calls_per_query": 0.0,
                                      "other_calls_per_query": 1.0, "paper_calls_per_query": "1 gen."}
    # 3-Agent's own calls per query beside Table 18's: 10 + 10 scores and one Conflict Detector call, then the answer.
    three = c["by_strategy"]["three_agent"]
    assert (three["scoring_calls_per_query"], three["other_calls_per_query"], three["paper_calls_per_query"]) == (21.0, 1.0, "≈ 19")
    assert any("three_agent calls/query: 21 scoring + 1 other (Table 18: ≈ 19)" in r[1] for r in summary_rows(res))
    assert c["by_strategy"]["pde"]["new_unique_calls"] == 0  # PDE reuses PDE-Uniform's scores and answers
    s = res["stats"]
    assert set(s["seconds"]) == {"counts", "vectorised", "loop"}
    assert s["results"]["counts"]["ci"][0] < s["results"]["counts"]["ci"][1]
    assert any(r[0] == "calls" for r in summary_rows(res))


def test_unknown_section_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="valid: calls, overhead"):
        run_bench(BenchOptions(out_dir=tmp_path), ("calls", "speed"))


def test_a_bench_module_adds_its_section_without_this_package_naming_it(tmp_path, monkeypatch):
    """Sections added by the modules of madara_cli/bench (the transformers engine's,
    ``hf``) are listed, run and put in the table and the summary like the built-in ones."""
    import madara_cli.bench as bench

    assert "hf" in bench.all_sections() and bench.added_sections()["hf"].name == "hf"
    with pytest.raises(ConfigError, match=r"vllm_cpu, openai_pool, hf\b"):
        run_bench(BenchOptions(out_dir=tmp_path), ("speed",))
    monkeypatch.setitem(bench._ADDED, "toy", bench.BenchSection(
        name="toy", run=lambda opts, scratch: {"ratio_toy": 2.0, "x": 1}, rows=lambda r: [("toy", "a toy measure", f"{r['ratio_toy']}x")]))
    res = run_bench(BenchOptions(out_dir=tmp_path / "bench"), ("toy",), say=lambda m: None)
    assert json.loads((tmp_path / "bench" / "toy.json").read_text())["x"] == 1
    assert json.loads((tmp_path / "bench" / "summary.json").read_text()) == {"toy": {"ratio_toy": 2.0}}
    assert ("toy", "a toy measure", "2.0x") in summary_rows(res)
    with pytest.raises(ValueError, match="already taken"):
        bench.register_section(bench.BenchSection(name="vllm", run=lambda o, s: {}, rows=lambda r: []))


def test_physical_cores_is_at_least_one():
    assert physical_cores() >= 1


def test_thread_default_leaves_busy_cores_alone(monkeypatch):
    from madara_cli.backends import llamacpp

    monkeypatch.setattr(llamacpp, "physical_cores", lambda: 8)
    monkeypatch.setattr(llamacpp, "runnable_now", lambda: 40.0)  # busy now: the 1-minute average decides
    monkeypatch.setattr(llamacpp.os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert llamacpp.default_threads() == 8  # idle: every physical core
    monkeypatch.setattr(llamacpp.os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    assert llamacpp.default_threads() == 5  # three cores taken by others
    monkeypatch.setattr(llamacpp.os, "getloadavg", lambda: (40.0, 0.0, 0.0))
    assert llamacpp.default_threads() == 1  # oversubscribed: one thread, never zero
    # Work that has just ended (a compile on every core) still weighs on the average;
    # what is runnable now caps it.
    monkeypatch.setattr(llamacpp.os, "getloadavg", lambda: (7.5, 0.0, 0.0))
    monkeypatch.setattr(llamacpp, "runnable_now", lambda: 0.0)
    assert llamacpp.default_threads() == 8
    monkeypatch.setattr(llamacpp, "runnable_now", lambda: 2.0)
    assert llamacpp.default_threads() == 6
    monkeypatch.setattr(llamacpp, "runnable_now", lambda: None)  # no /proc/loadavg: the average alone
    assert llamacpp.default_threads() == 1


def test_runnable_now_reads_proc_loadavg(monkeypatch, tmp_path):
    from madara_cli.backends import llamacpp

    reads = iter(["0.50 0.40 0.30 3/211 999\n", "0.50 0.40 0.30 1/211 999\n", "0.50 0.40 0.30 2/211 999\n"])
    real = llamacpp.Path

    class FakePath(type(real())):
        def read_text(self, *a, **k):
            return next(reads) if str(self) == "/proc/loadavg" else super().read_text(*a, **k)

    monkeypatch.setattr(llamacpp, "Path", FakePath)
    assert llamacpp.runnable_now(samples=3, gap_s=0) == 1.0  # median of 2, 0, 1 (each minus the reader)
    reads = iter(["garbage"])
    assert llamacpp.runnable_now(samples=1, gap_s=0) is None


@pytest.mark.llm
def test_model_sections_run_on_the_embedded_model(tmp_path):
    opts = BenchOptions(limit=1, stage_limit=1, prompts=2, score_questions=1, score_docs=2, n_threads=1, out_dir=tmp_path)
    res = run_bench(opts, ("overhead", "scoring", "stages"), say=lambda m: None)
    assert res["overhead"]["ratio_madara_vs_raw"] > 0
    assert res["scoring"]["logprob"]["scores"] == res["scoring"]["generate"]["scores"] == 6
    assert res["stages"]["calls_issued"] > 0 and set(res["stages"]["cells"]) == {"nf", "pde_random", "three_agent", "pde"}


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (the runs are the fake engine's)
def test_the_plan_section_puts_each_strategys_estimate_beside_its_run(tmp_path, monkeypatch, fake_engine):
    """``madara bench --only plan``: a calibration run, then per strategy a plan and a run
    in a folder of its own, the estimate ÷ the wall time in the table (on the fake engine
    here, two strategies: the figures are whatever they are, the shape is checked)."""
    import madara_cli.config as config

    monkeypatch.setattr(config, "options", lambda group: ["nf", "three_agent"] if group == "strategy" else [])
    res = run_bench(BenchOptions(limit=2, out_dir=tmp_path / "bench"), ("plan",), say=lambda m: None)["plan"]
    assert set(res["strategies"]) == {"nf", "three_agent"} and res["skipped"] == {}
    three = res["strategies"]["three_agent"]
    assert three["uncached_calls"] > res["strategies"]["nf"]["uncached_calls"] > 0
    assert three["estimate_s"] > 0 and three["ratio_estimate_vs_wall"] > 0 and three["calibration"]
    rows = [r for r in summary_rows({"plan": res}) if r[0] == "plan"]
    assert rows[0][1].startswith("calibration: madara run strategy=madara limit=1 seed=1")
    assert [r[1].split(":")[0] for r in rows[1:]] == ["nf", "three_agent"] and all(r[2].endswith("×") for r in rows[1:])
