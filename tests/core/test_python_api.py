"""madara_cli.api: the functions the verbs call, usable from Python. The worked example
of docs/python-api.md runs as written (on the embedded model); the rest needs no model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import madara_cli.api as m
from madara_cli.core.errors import ConfigError
from tests.fakes import cli
from tests.results_fixtures import demo_like_results

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python-api.md"


def test_route_takes_percent_and_asks_for_degenerate():
    assert m.route(13.9, (0.76, 0.43, 0.08)).strategy == "pde"  # Table 2: Llama-3.1-8B on CONFLICTS
    assert m.route(60.8, (0.39, 0.28, 0.41), rsc_class="stochastic").strategy == "sda"
    routed = m.route(45, degenerate=True)
    assert routed.strategy == "pde" and "degenerate" in routed.reason and routed.nf_only == "three_agent"
    with pytest.raises(ConfigError, match=r"nf=0.45 reads as a fraction .* nf=45"):
        m.route(0.45, (0.7, 0.4, 0.1))
    with pytest.raises(ConfigError, match="degenerate=True"):
        m.route(45)
    with pytest.raises(ConfigError, match="contradict"):
        m.route(45, (0.7, 0.4, 0.1), degenerate=True)
    assert m.route(0, degenerate=True).strategy == "pde"  # 0 is a percentage, not a fraction


@pytest.mark.parametrize("call,needle", [
    (lambda: m.route(45, rho=("a", "b", "c")), "rho is three Spearman correlations"),
    (lambda: m.route(45, rho=0.7), "rho is three Spearman correlations"),
    (lambda: m.route(45, rho=(0.7, 0.4, float("nan"))), "rho is three Spearman correlations"),
    (lambda: m.route(45, (0.7, 0.4, 0.1), tau_nf=-5), "tau_nf is in [0, 100]"),
    (lambda: m.route(45, (0.7, 0.4, 0.1), rho1=2), "rho1 is in [-1, 1]"),
    (lambda: m.route(45, (0.7, 0.4, 0.1), entropy="high"), "entropy is in [0, 1]"),
    (lambda: m.route(45, (0.7, 0.4, 0.1), iso_em=50, iso_n=0), "iso_n is how many queries"),
    (lambda: m.route(45, (0.7, 0.4, 0.1), iso_em=50, iso_n=2.5), "iso_n is how many queries"),
    (lambda: m.configs(config={"strategy": {"name": "nf"}}), "config= is a composed config"),
])
def test_the_api_refuses_what_the_command_line_refuses_with_a_config_error(call, needle):
    """madara route's ranges (--tau-nf 0..100, --iso-n >= 1, ...) hold in Python too, and a
    value of the wrong kind is a ConfigError, not a TypeError or ValueError of its own."""
    with pytest.raises(ConfigError) as e:
        call()
    assert type(e.value) is ConfigError and needle in str(e.value)


def test_a_results_folder_that_is_a_file_is_a_config_error(tmp_path: Path, no_engine):
    blocker = tmp_path / "a-file"
    blocker.write_text("kept")
    for results in (blocker, blocker / "under"):
        with pytest.raises(ConfigError, match=f"cannot use {blocker}: not a folder"):
            m.run_cell(["strategy=nf", "limit=1"], results=results)
    assert blocker.read_text() == "kept"


def test_a_cells_config_runs_as_a_process_first_call(tmp_path: Path, fake_server):
    """run_cell(config=...) loads the plug-ins itself: as the first call of a process it ran
    into "unknown backend 'llamacpp'; valid: " (an empty list), as only compose() loaded them."""

    from tests.fakes import chat_answer

    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer(content="Paris")
    cfg = m.compose(["strategy=nf", "limit=1", "backend=openai", f"backend.base_url={fake_server.base_url}"], results=tmp_path / "r")
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    done = _run_python(["-c", f"import madara_cli.api as m; print(m.run_cell(config={str(path)!r}).record.n)"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]


def test_a_results_folder_as_dataframes(tmp_path: Path):
    from madara_cli.results.summary import summary_frame

    root = demo_like_results(tmp_path / "results")
    frames = m.load(root)
    pd.testing.assert_frame_equal(frames.cells, summary_frame(root))  # the rows and columns of summary.csv
    assert len(frames.cells) == 10 and "route" in frames.cells.columns
    assert len(frames.predictions) == 10 * 10 and set(frames.predictions["key"]) == set(frames.cells["key"])
    mine = frames.predictions[frames.predictions["strategy"] == "pde"]
    assert mine.groupby("model")["em"].mean().to_dict() == {"llama-3.1-8b": 0.9, "smollm2-135m": 0.7}
    probes = frames.probes.set_index("model")
    assert list(frames.probes.columns) == list(m.PROBE_COLUMNS)
    assert probes.loc["smollm2-135m", "route"] == "pde" and probes.loc["smollm2-135m", "em_nf_pct"] == pytest.approx(30.0)
    assert probes.loc["llama-3.1-8b", "rho1"] == pytest.approx(0.7) and not probes.loc["llama-3.1-8b", "degenerate"]
    with pytest.raises(ConfigError, match="no results folder"):
        m.load(tmp_path / "nowhere")


def test_configs_from_overrides_a_sweep_or_a_config_file(tmp_path: Path):
    (cfg,) = m.configs(["strategy=pde", "limit=2"], results=tmp_path / "r")
    assert cfg.strategy.name == "pde" and cfg.limit == 2 and cfg.results_dir == str(tmp_path / "r")
    assert [c.strategy.name for c in m.configs(["strategy=nf,pde"], multirun=True)] == ["nf", "pde"]
    with pytest.raises(ConfigError, match="multirun=True"):
        m.configs(["strategy=nf,pde"])

    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    (again,) = m.configs(config=path, results=tmp_path / "elsewhere")
    assert again.strategy == cfg.strategy and again.results_dir == str(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="pass no overrides"):
        m.configs(["limit=3"], config=path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: text\n")
    with pytest.raises(ConfigError, match="not a madara cell config"):
        m.configs(config=bad)


def test_the_verbs_go_through_the_api(monkeypatch, capsys, tmp_path: Path):
    """route, probe and run call these same functions (thin verbs): a spy sees each call."""
    seen = []

    def spy(name, result=None):
        def call(*args, **kwargs):
            seen.append((name, args, kwargs))
            if result is None:
                raise ConfigError(f"{name} reached")
            return result
        return call

    monkeypatch.setattr(m, "route", spy("route", m.Routed("atf", "why", "three_agent", None, "paper")))
    code, out, _ = cli("route", "--nf", "45", "--rho", "0.7", "0.4", "0.1", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "route: atf" in out and seen[-1][1] == (45.0, (0.7, 0.4, 0.1))
    monkeypatch.setattr(m, "probe", spy("probe"))
    code, _, err = cli("probe", "model=qwen3-0.6b", "--n", "3", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "probe reached" in err and seen[-1][1] == (["model=qwen3-0.6b"],) and seen[-1][2]["n"] == 3
    monkeypatch.setattr(m, "run_configs", spy("run_configs"))
    code, _, err = cli("run", "strategy=nf", "limit=1", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "run_configs reached" in err and seen[-1][1][0][0].strategy.name == "nf"


def test_evaluate_returns_plain_data_and_table_prints_it(tmp_path: Path, fake_engine, capsys):
    """evaluate(): per cell, the metrics with their intervals, health, route and cost as
    plain data (JSON as it is); a plain progress bar while it runs (not a terminal);
    table(): one line per cell within 100 columns."""
    import json

    data = m.evaluate(["strategy=nf,three_agent", "limit=3"], multirun=True, results=tmp_path)
    shown = capsys.readouterr().err  # not a terminal, not a notebook: stderr, so a script's stdout stays its own
    assert "generate [" in shown and "] 3/3 calls done in" in shown  # the plain bar, redrawn with \r, ended per stage
    assert json.loads(json.dumps(data)) == data and data["failed"] == {}
    by_strategy = {r["strategy"]: r for r in data["results"].values()}
    nf, three = by_strategy["nf"], by_strategy["three_agent"]
    assert nf["n"] == 3 and 0 <= nf["em_ci95"][0] <= nf["em"] <= nf["em_ci95"][1] <= 100
    assert nf["health"] == "ok" and three["health"] in ("ok", "degraded") and nf["route"] is None
    assert three["requests"] == three["sent"] + three["cached"] + three["repeated"] > nf["requests"]
    assert Path(nf["path"]).is_dir() and nf["key"] in data["results"]
    m.table(data)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= 100 and lines[0].split()[:3] == ["model", "benchmark", "strategy"]
    assert sorted(ln.split()[2] for ln in lines[1:]) == ["nf", "three_agent"]
    m.run_cell(["strategy=nf", "limit=3"], results=tmp_path, progress=False)  # finished: read back, and silent
    assert capsys.readouterr().out == ""


def _doc_code() -> tuple[list[str], list[str]]:
    """docs/python-api.md's ```python blocks, and its `python -c "..."` lines."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    one_liners = re.findall(r'^python -c "(.*?)"', text, flags=re.M)
    return blocks, one_liners


def test_the_doc_names_every_public_function():
    text = DOC.read_text(encoding="utf-8")
    for name in ("run_cell", "run_grid", "run", "configs", "run_configs", "compose", "probe", "route", "load", "cells_frame",
                 "predictions_frame", "probes_frame", "evaluate", "table"):
        assert f"`{name}(" in text or f"`{name}`" in text, name
    blocks, one_liners = _doc_code()
    assert len(blocks) == 1 and len(one_liners) == 1


def _run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MADARA_RESULTS", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=3600)


def test_the_docs_one_liner_runs(tmp_path: Path):
    _, (line,) = _doc_code()
    done = _run_python(["-c", line], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pde"


@pytest.mark.llm
def test_the_docs_worked_example_runs(tmp_path: Path):
    """The block of docs/python-api.md as written: a real NF cell and probe on SmolLM2."""
    (block,), _ = _doc_code()
    script = tmp_path / "example.py"
    script.write_text(block, encoding="utf-8")
    done = _run_python([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NF on 2 queries: EM " in done.stdout and "probe routes to " in done.stdout
    assert "generate [" in done.stderr and ", health ok, 2 requests" in done.stdout  # the plain bar (stderr: a script, not a notebook), evaluate's plain data
    cells = pd.read_csv(tmp_path / "results-api" / "summary.csv")
    assert list(cells["strategy"]) == ["nf"] and cells["n"].tolist() == [2]
    assert any((tmp_path / "results-api" / "probes").iterdir())
