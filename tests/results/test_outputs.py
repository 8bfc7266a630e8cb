"""What a finished cell leaves for people and programs: provenance, logged prompts,
summary.csv, long-format numeric tables, Styler LaTeX, `madara show`, `compare --json`,
Hydra habits (-m sweeps, --cfg job) and progress as log lines on a non-terminal."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from madara_cli.composition import compose
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import cell_from_cfg, expand_sweep, has_sweep
from madara_cli.experiment.runner import run_cell
from madara_cli.results import long_format, provenance, record_files, summary
from tests.conftest import ROOT
from tests.fakes import FakeBackend, cli


def _cell(results: Path, *overrides: str):
    cfg = compose(["limit=4", f"results_dir={results}", *overrides])
    with EnginePool(factory=lambda c: FakeBackend()) as pool:
        return cfg, run_cell(cfg, pool)


def test_cell_records_provenance_and_prompts(results_dir):
    cfg, r = _cell(results_dir, "strategy=three_agent", "retriever.k=5")
    m = json.loads((r.folder / "metrics.json").read_text())
    prov = m["provenance"]
    from madara_cli import __version__

    assert prov["madara_version"] == __version__
    assert prov["overrides"] == ["limit=4", f"results_dir={results_dir}", "strategy=three_agent", "retriever.k=5"]
    assert prov["python"].count(".") == 2 and prov["host"]
    assert prov["packages"]["hydra-core"] and prov["started"] <= prov["ended"]
    if (ROOT / ".git").exists():
        assert len(prov["git_commit"]) == 40
    # Every request of the cell is logged once, keyed by its cache digest.
    prompts = [json.loads(x) for x in (r.folder / "prompts.jsonl").read_text().splitlines()]
    acc = m["accounting"]
    assert len({p["digest"] for p in prompts}) == len(prompts) > 0
    assert {p["stage"] for p in prompts} >= {"generate"}
    assert len(prompts) <= acc["requests"]
    gen = next(p for p in prompts if p["stage"] == "generate")
    assert gen["messages"][0]["role"] == "system" and "Question:" in gen["messages"][-1]["content"] and "reply" in gen


def test_log_samples_off_writes_no_prompts_and_keeps_the_key(results_dir):
    _, on = _cell(results_dir / "a")
    _, off = _cell(results_dir / "b", "log_samples=false")
    assert on.cell.key == off.cell.key
    assert (on.folder / "prompts.jsonl").is_file() and not (off.folder / "prompts.jsonl").exists()


def test_new_settings_at_default_keep_old_cell_keys():
    base = cell_from_cfg(compose(["limit=5"])).key
    assert cell_from_cfg(compose(["limit=5", "generation.style=zeroshot", "benchmark.revision=null"])).key == base
    assert cell_from_cfg(compose(["limit=5", "generation.style=oneshot"])).key != base


def _rewrite(result, **fields) -> None:
    """Replace fields of a finished cell's record, written back by the store."""
    from dataclasses import replace

    record = replace(record_files.read_cell(result.folder), **fields)
    record_files.write_cell(result.folder, record, (result.folder / record_files.CONFIG_FILE).read_text(), record_files.read_predictions(result.folder))


def test_summary_has_one_numeric_row_per_cell_and_every_metric(results_dir):
    _, old = _cell(results_dir, "strategy=nf")
    _, r = _cell(results_dir, "strategy=sda")
    # Metrics come from each cell, not a fixed list: a cell from a version without
    # em_strict gets an empty value, a cell with it its number.
    _rewrite(old, em_strict=None)
    _rewrite(r, em_strict=0.25)
    summary.write_summary(results_dir)
    df = pd.read_csv(results_dir / "summary.csv")
    assert len(df) == 2 and set(df["strategy"]) == {"nf", "sda"}
    for col in ("n", "em_pct", "f1_pct", "contains_pct", "em_ci95_low_pct", "calls", "tokens_in", "tokens_out", "seconds", "k", "seed", "limit"):
        assert pd.api.types.is_numeric_dtype(df[col]), col
    assert df.loc[df.strategy == "sda", "em_strict_pct"].item() == 25.0 and df.loc[df.strategy == "nf", "em_strict_pct"].isna().all()
    import importlib.util

    assert (results_dir / "summary.parquet").is_file() == (importlib.util.find_spec("pyarrow") is not None)


def test_long_table_is_numeric_with_ours_paper_delta():
    from madara_cli.tables.pairs import Measured, pair

    df = pd.DataFrame([{"Model": "Llama-3.1-8B", "Task": "Conflicts", "NF": pair(Measured(30.0, 100), 13.9), "p": "0.012 / n/a",
                        "CoT": pair(None, 20.0)}], dtype=object)
    df.attrs["name"] = "t"
    long = long_format.long_table(df)
    nf = long[long.column == "NF"].iloc[0]
    assert (nf.row, nf.ours, nf.paper, nf.n) == ("Llama-3.1-8B / Conflicts", 30.0, 13.9, 100)
    assert nf.delta == pytest.approx(16.1)
    assert long[long.column == "p"].iloc[0].ours == pytest.approx(0.012)
    cot = long[long.column == "CoT"].iloc[0]
    assert pd.isna(cot.ours) and cot.paper == 20.0
    text = long.to_csv(index=False)
    back = pd.read_csv(pd.io.common.StringIO(text))
    assert all(pd.api.types.is_numeric_dtype(back[c]) for c in ("ours", "paper", "delta", "n"))
    assert "−" not in text


def test_long_table_reads_the_numbers_any_cell_keeps_beside_its_text():
    """The results layer reads a cell's numbers through its own protocol (NumberPair,
    Identified), not the tables' Pair class: text that would parse otherwise is not re-read."""

    class Kept(str):  # a table cell from anywhere: text plus the numbers it stands for
        def __new__(cls, text, ours, paper):
            obj = super().__new__(cls, text)
            obj.ours, obj.paper, obj.delta, obj.n, obj.p = ours, paper, None, 7, 0.5
            obj.ident = ("m", "b", "s", "em")
            return obj

    kept = Kept("see the appendix", 1.5, None)
    assert isinstance(kept, long_format.NumberPair) and not isinstance("1.5 / 2.0", long_format.NumberPair)
    df = pd.DataFrame([{"Model": "M", "A": kept, "B": "3.0 / 4.0 (−1.0)", "C": Kept("12 / 9", None, None)}], dtype=object)
    long = long_format.long_table(df, "t").set_index("column")
    assert (long.at["A", "ours"], long.at["A", "n"], long.at["A", "p"], long.at["A", "strategy"], long.at["A", "unit"]) == (1.5, 7, 0.5, "s", "%")
    assert (long.at["B", "ours"], long.at["B", "paper"], long.at["B", "delta"]) == (3.0, 4.0, -1.0) and pd.isna(long.at["B", "model"])
    # a kept cell without numbers is read from its text, its ids still naming the cell
    assert (long.at["C", "ours"], long.at["C", "paper"], long.at["C", "model"]) == (12.0, 9.0, "m")


def test_tables_write_long_csv_and_styler_latex(results_dir, tmp_path):
    from madara_cli.tables import write_tables

    _cell(results_dir, "strategy=nf")
    out = tmp_path / "tables"
    write_tables(results_dir, out, only=["table1"], formats=("tex", "long"))
    tex = (out / "table1.tex").read_text()
    assert "\\begin{tabular}" in tex and "\\toprule" in tex and "\\caption{" in tex and "\\label{tab:madara-table1}" in tex
    assert tex.index("\\parbox") < tex.index("\\end{table}")
    long = pd.read_csv(out / "table1.long.csv")
    mine = long[long.row.str.contains("smollm2", case=False)]
    assert not mine.empty and mine.ours.notna().any() and pd.api.types.is_float_dtype(long.ours)
    assert (results_dir / "summary.csv").is_file()


def test_show_prints_metrics_and_provenance(results_dir):
    _, r = _cell(results_dir, "strategy=nf")
    res = cli("show", r.cell.key[:30], "--results", str(results_dir))
    assert res.returncode == 0, res.stderr
    assert "EM %" in res.stdout and "madara_version" not in res.stdout  # the summary first; provenance behind --all
    res = cli("show", r.cell.key[:30], "--results", str(results_dir), "--all")
    assert res.returncode == 0, res.stderr
    assert "madara_version" in res.stdout and "overrides" in res.stdout and "strategy=nf" in res.stdout and "em" in res.stdout
    if (ROOT / ".git").exists():
        assert provenance.git_commit()["commit"][:12] in res.stdout
    bad = cli("show", "no-such-cell", "--results", str(results_dir))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_compare_json(results_dir):
    _, a = _cell(results_dir, "strategy=nf")
    _, b = _cell(results_dir, "strategy=sda")
    res = cli("compare", str(a.folder), str(b.folder), "--json", "--resamples", "200")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["n"] == 4 and 0.0 <= data["p_mcnemar_exact"] <= 1.0


def test_cfg_job_prints_yaml_and_sweeps_need_multirun(tmp_path):
    res = cli("run", "--cfg", "job", "strategy=pde", "limit=2")
    assert res.returncode == 0, res.stderr
    cfg = yaml.safe_load(res.stdout)
    assert cfg["strategy"]["name"] == "pde" and cfg["limit"] == 2
    sweep = cli("run", "strategy=nf,pde", "limit=2")
    assert sweep.returncode == 2 and "-m/--multirun" in sweep.stderr and sweep.stderr.count("\n") == 1
    many = cli("run", "-m", "--cfg", "job", "strategy=nf,pde", "limit=2")
    assert many.returncode == 0 and [d["strategy"]["name"] for d in yaml.safe_load_all(many.stdout)] == ["nf", "pde"]


def test_multirun_fills_an_adhoc_grid():
    assert has_sweep(["strategy=nf,pde", "limit=2"]) and not has_sweep(["limit=2"])
    cfgs = expand_sweep(["strategy=nf,pde", "seed=0,1", "limit=2"])
    assert [(c.strategy.name, c.seed) for c in cfgs] == [("nf", 0), ("nf", 1), ("pde", 0), ("pde", 1)]
    assert {c.grid_name for c in cfgs} == {"adhoc"} and all(c.limit == 2 for c in cfgs)


def test_results_option_is_the_results_dir_override(tmp_path):
    res = cli("run", "--cfg", "job", "--results", str(tmp_path / "r"))
    assert yaml.safe_load(res.stdout)["results_dir"] == str(tmp_path / "r")
    res = cli("run", "--cfg", "job", "--results", str(tmp_path / "r"), f"results_dir={tmp_path / 'explicit'}")
    assert yaml.safe_load(res.stdout)["results_dir"] == str(tmp_path / "explicit")
    probe_help = cli("probe", "--help")
    assert "--model" in probe_help.stdout and "-m," not in probe_help.stdout and "--results" in probe_help.stdout


def test_launcher_sweep_folder_is_under_the_results_folder(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    from madara_cli.experiment.launch import jobs_folder, sweep_overrides

    runs = jobs_folder("demo", [f"results_dir={tmp_path}"])
    assert runs == tmp_path.resolve() / ".hydra" / "demo"
    args = sweep_overrides("demo", [f"results_dir={tmp_path}"], "joblib", None, runs / "cells-x.json", 11, runs)
    assert f"hydra.sweep.dir={runs}" in args and f"+madara_cells={runs / 'cells-x.json'}" in args


def test_progress_logs_lines_on_a_non_terminal(caplog):
    from madara_cli.core.progress import StageProgress

    p = StageProgress(log_lines=True)
    p.label = "[1/1] m/b/nf"
    with caplog.at_level(logging.INFO, logger="madara_cli.core.progress"):
        with p:
            for done in range(0, 21):
                p._log(p.label + " generate", done, 20, now=float(done))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "[1/1] m/b/nf generate: 0/20 calls"
    assert lines[-1].startswith("[1/1] m/b/nf generate: 20/20 calls") and "done in" in lines[-1]
    assert 3 <= len(lines) <= 12  # every tenth, not every call
    assert any("ETA" in x and "calls/s" in x for x in lines)


def test_warm_cache_is_read_offline_without_variables(monkeypatch):
    """Hub unreachable, no HF_HUB_OFFLINE: the loader retries in offline mode (the local
    cache) before failing; the libraries' offline flags are restored afterwards."""
    import datasets.config as dcfg

    from madara_cli.core.errors import DataError
    from madara_cli.data import sources

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(sources, "hub_reachable", lambda *a, **k: False)
    seen = []

    def cached(hf_id, config, split, data_files, revision):
        seen.append((dcfg.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE"), revision))
        return [{"question": "q", "answer": "a"}]

    before = dcfg.HF_HUB_OFFLINE
    monkeypatch.setattr(sources, "_load_hub", cached)
    assert sources.read_hub("some/dataset", None, "test", revision="abc123") == [{"question": "q", "answer": "a"}]
    assert seen == [(True, "1", "abc123")]
    assert dcfg.HF_HUB_OFFLINE == before and "HF_HUB_OFFLINE" not in os.environ

    def cold(*a, **k):
        raise FileNotFoundError("not cached")

    monkeypatch.setattr(sources, "_load_hub", cold)
    with pytest.raises(DataError) as e:
        sources.read_hub("some/dataset")
    msg = str(e.value)
    assert "\n" not in msg and "benchmark.path=FILE" in msg and "HF_HUB_OFFLINE" in msg


def test_plan_estimates_cells_whose_data_is_not_here(tmp_path, monkeypatch):
    """table2 before anything is downloaded: cells are counted on placeholder queries."""
    from madara_cli.data import sources
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.plan import plan_grid

    monkeypatch.setattr(sources, "hub_reachable", lambda *a, **k: False)
    monkeypatch.setattr(sources, "_load_hub", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("cold")))
    cfgs = expand("table2", [f"results_dir={tmp_path}", "limit=3", "backend=vllm"], axes={"model": ["qwen2.5-7b"]})
    p = plan_grid("table2", cfgs)
    total = p.total()
    assert total.estimated_cells == total.cells == len(cfgs) > 0
    assert p.by_strategy["nf"].requests == 3 * sum(1 for c in cfgs if c.strategy.name == "nf")
    big = plan_grid("table2", expand("table2", [f"results_dir={tmp_path}", "limit=200", "backend=vllm", "strategy=nf"], axes={"model": ["qwen2.5-7b"]})[:1])
    assert big.by_strategy["nf"].requests == 200  # walked on 20 placeholders, scaled to the size asked for
    assert any("placeholder" in n for n in p.notes)


def test_oneshot_style_adds_one_worked_example_turn():
    from madara_cli.agents.generator import generation_request
    from madara_cli.config.folders import shipped_prompt_set
    from madara_cli.data.mini import generate

    ex = generate(3)[0]
    zero = generation_request(ex, ex.docs[:2], 32, 0.0, 0)
    one = generation_request(ex, ex.docs[:2], 32, 0.0, 0, style="oneshot")
    assert [m.role for m in zero.messages] == ["system", "user"]
    assert [m.role for m in one.messages] == ["system", "user", "assistant", "user"]
    assert one.messages[0] == zero.messages[0] and one.messages[-1] == zero.messages[-1]
    shipped = shipped_prompt_set()
    assert shipped.render("factoid_oneshot_question") in one.messages[1].content
    assert one.messages[2].content == shipped.render("factoid_oneshot_answer") == "Harrowgate"
    # The worked example's entity is not one the mini benchmark can generate.
    assert all("Ombrewick" not in d.text for e in generate(60) for d in e.docs)
    with pytest.raises(ValueError):
        generation_request(ex, ex.docs[:2], 32, 0.0, 0, style="fewshot")
    assert "generation.style=oneshot" in (ROOT / "configs" / "grid" / "demo.yaml").read_text()
    assert all("style" not in (ROOT / "configs" / "grid" / f"{g}.yaml").read_text() for g in ("table1", "table2", "table6", "table7"))


def test_rows_below_the_floor_show_f1_and_contains():
    from madara_cli.tables.pairs import FLOOR_NOTE, Measured, pair

    low = pair(Measured(10.0, 10, f1=0.35, contains=0.6), None)
    assert str(low) == "10.0 (F1 35.0, cont. 60.0) / n/a" and low.ours == 10.0
    assert str(pair(Measured(40.0, 10, f1=0.5, contains=0.6), None)) == "40.0 / n/a"
    assert str(pair(Measured(10.0, 10, f1=0.35, contains=0.6), 12.0)) == "10.0 / 12.0 (−2.0)"
    assert "F1" in FLOOR_NOTE


def test_reproduce_exits_non_zero_and_lists_what_was_skipped(tmp_path):
    from tests.conftest import configs_with_grid

    env = configs_with_grid(tmp_path, "skip-repro", "axes:\n  model: [llama-3.1-8b]\n  benchmark: [conflicts]\n  strategy: [nf]\noverrides: [limit=2]\n")
    res = cli("reproduce", "--backend", "llamacpp", "--models", "smollm2-135m", "--grids", "skip-repro",
                 "--results", str(tmp_path / "results"), env=env)
    assert res.returncode == 1, res.stderr
    assert "skipped smollm2-135m/conflicts/nf" in res.stdout and "benchmark.path" in res.stdout
    assert "reproduce incomplete: 1" in res.stderr
    assert (tmp_path / "results" / "tables" / "table1.md").is_file()  # what could be written still is


def test_verbose_shows_info_lines(results_dir, capsys):
    import io

    from rich.console import Console

    from madara_cli.core import logs

    buf = io.StringIO()
    monkey_saved = logs._CONFIGURED
    logs._CONFIGURED = False
    handlers = {n: list(logging.getLogger(n).handlers) for n in logs.LOGGERS}
    try:
        logs.setup_logging(1, Console(file=buf, width=200))
        _cell(results_dir, "strategy=nf")
        assert "__mini__nf__" in buf.getvalue() and "EM" in buf.getvalue()
        logs.setup_logging(0)
        _cell(results_dir / "quiet", "strategy=nf")
        assert "quiet" not in buf.getvalue()
    finally:
        for n, hs in handlers.items():
            logging.getLogger(n).handlers = hs
        logs._CONFIGURED = monkey_saved
    res = cli("-v", "ls", "grids")
    assert res.returncode == 0 and "table2" in res.stdout


def test_probe_records_provenance_and_prompts(tmp_path):
    from tests.fakes import scripted_probe

    record, path, *_ = scripted_probe(tmp_path, lambda user, sig: sig % 6)
    saved = json.loads(path.read_text())
    assert saved["provenance"]["overrides"] == ["benchmark=mini", f"results_dir={tmp_path}"]
    assert saved["provenance"]["madara_version"] and record.provenance == saved["provenance"]
    stages = {json.loads(x)["stage"] for x in (path.parent / "prompts.jsonl").read_text().splitlines()}
    assert {"generate", "rsc-cot", "rsc-rescore"} <= stages


def test_prompts_carry_the_engines_rendered_template(results_dir):
    class Rendering(FakeBackend):
        def _render(self, messages):
            return "".join(f"<{m.role}>{m.content}" for m in messages) + "<assistant>"

    cfg = compose(["limit=2", f"results_dir={results_dir}", "strategy=nf"])
    with EnginePool(factory=lambda c: Rendering()) as pool:
        r = run_cell(cfg, pool)
    (row, *_) = [json.loads(x) for x in (r.folder / "prompts.jsonl").read_text().splitlines()]
    assert row["rendered"].startswith("<system>") and row["rendered"].endswith("Answer:<assistant>")


def test_config_dir_adds_and_replaces_group_options(tmp_path):
    user = tmp_path / "mine"
    (user / "strategy").mkdir(parents=True)
    (user / "strategy" / "sda_top3.yaml").write_text("name: sda\ntop_k: 3\n")  # no defaults list: sda's schema by name
    (user / "strategy" / "pde.yaml").write_text("name: pde\ntop_k: 4\n")  # replaces the shipped pde
    (user / "strategy" / "nf_top3.yaml").write_text("name: nf\ntop_k: 3\n")  # NF keeps every document: no top_k
    ls = cli("--config-dir", str(user), "ls", "strategies")
    assert ls.returncode == 0 and "sda_top3" in ls.stdout and "three_agent" in ls.stdout
    mine = yaml.safe_load(cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=sda_top3", "strategy.scoring=logprob").stdout)
    assert mine["strategy"] == {"name": "sda", "top_k": 3, "weights": [0.4, 0.3, 0.3], "scoring": "logprob", "cot": False, "conflict": "per_query", "rank_ties": "ordinal"}
    pde = yaml.safe_load(cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=pde", "strategy.vote=uniform").stdout)
    assert pde["strategy"]["top_k"] == 4 and pde["strategy"]["vote"] == "uniform"
    nf = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=nf_top3")
    assert nf.returncode == 2 and "strategy.top_k does not apply to strategy nf; its settings: name" in nf.stderr
    bad = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=sda_top3", "strategy.kappa=1")
    assert bad.returncode == 2 and "strategy.kappa does not apply to strategy sda_top3" in bad.stderr
    assert yaml.safe_load(cli("run", "--cfg", "job", "strategy=pde").stdout)["strategy"]["top_k"] == 5
    missing = cli("--config-dir", str(tmp_path / "nope"), "ls")
    assert missing.returncode == 2 and "no such folder" in missing.stderr


def test_versions_are_those_of_the_modules_that_ran(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(__version__="9.9.9"))
    assert provenance.package_versions()["llama-cpp-python"] == "9.9.9"
    cfg = compose([])
    assert provenance.provenance(cfg, "a", "b")["engine"] == {"backend": "llamacpp", "package": "llama-cpp-python", "version": "9.9.9"}


def test_a_sweep_outside_run_m_is_one_line_with_the_hint():
    from madara_cli.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        compose(["seed=0,1"])
    assert "\n" not in str(e.value) and "madara run -m seed=0,1" in str(e.value)
