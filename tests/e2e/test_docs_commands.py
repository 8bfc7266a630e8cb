"""The commands the docs show are run: the MLflow snippet under MLflow's own rules, the
`madara compare` line of the verb list, and the prompt-set worked example (its cp/sed
steps as written, its `madara run` on the fake engine)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import cli

ROOT = Path(__file__).resolve().parents[2]
RUNNING = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")


def fenced(text: str, after: str, lang: str) -> str:
    """The first ```lang block after the heading or sentence ``after``."""
    start = text.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, start)
    assert m, (after, lang)
    return m.group(1)


def test_the_mlflow_snippet_reads_the_runs_madara_logs(tmp_path, monkeypatch, capsys, fake_engine):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "logger=mlflow", "strategy=nf", "limit=2", "results_dir=results", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    snippet = fenced(RUNNING, "## Experiment tracking", "python")
    script = snippet.rstrip().splitlines()
    script[-1] = f"print({script[-1]}.to_json(orient='records'))"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}  # the snippet must set what it needs
    done = subprocess.run([sys.executable, "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    (cell,) = [p.name for p in (tmp_path / "results" / "adhoc").iterdir() if p.is_dir()]
    assert [r["tags.madara_key"] for r in rows] == [cell] and rows[0]["params.strategy.name"] == "nf"
    ui = re.search(r"`(MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri results/mlruns)`", RUNNING.replace("\n", " "))
    assert ui, "the docs' mlflow ui line must set MLFLOW_ALLOW_FILE_STORE (MLflow 3)"


def test_the_compare_line_of_the_verb_list_runs(tmp_path, monkeypatch, capsys, fake_engine):
    line = next(ln for ln in RUNNING.splitlines() if ln.startswith("madara compare "))
    usage = line.split("#")[0].split()
    assert usage[:4] == ["madara", "compare", "A", "B"] and "[--results" in usage and "[--json]" in usage
    for strategy in ("nf", "pde"):
        code, _, err = cli("run", f"strategy={strategy}", "limit=3", f"results_dir={tmp_path}", monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err
    keys = sorted(p.name for p in (tmp_path / "adhoc").iterdir() if p.is_dir())
    nf_key = next(k for k in keys if "__nf__" in k)
    pde_key = next(k for k in keys if "__pde__" in k)
    code, out, err = cli("compare", nf_key, pde_key, "--results", str(tmp_path), "--json", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert json.loads(out)["n"] == 3
    code, out, err = cli("compare", str(tmp_path / "adhoc" / nf_key), str(tmp_path / "adhoc" / pde_key), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "McNemar p" in out and "[" in out


def test_the_prompt_set_worked_example(tmp_path, monkeypatch, capsys, fake_engine):
    block = fenced(RUNNING, "A worked example, one sentence of the Relevance Assessor changed", "bash")
    lines = [ln.split("  #")[0].rstrip() for ln in block.replace("\\\n", " ").splitlines()]
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    ran = []
    for ln in lines:
        if ln.startswith("madara run"):
            code, _, err = cli(*shlex.split(ln)[1:], "results_dir=results", monkeypatch=monkeypatch, capsys=capsys)
            assert code == 0, err
        elif ln.startswith(("mkdir", "cp", "sed")):
            subprocess.run(["bash", "-c", ln], cwd=tmp_path, check=True, timeout=60)
        else:
            continue
        ran.append(ln.split()[0])
        monkeypatch.chdir(tmp_path)
    assert ran == ["mkdir", "cp", "sed", "madara"]
    grep = next(ln for ln in lines if ln.startswith("grep"))
    needle = re.search(r'"([^"]+)"', grep).group(1)
    (prompts,) = (tmp_path / "results" / "adhoc").glob("*/prompts.jsonl")
    rows = [json.loads(x) for x in prompts.read_text(encoding="utf-8").splitlines()]
    relevance = [r for r in rows if r["stage"] == "score" and any("useful" in m["content"] or needle in m["content"] for m in r["messages"])]
    assert relevance and all(any(needle in m["content"] for m in r["messages"]) for r in relevance)
    assert "8.5 minutes" in RUNNING  # the example says what it costs on the embedded model


def test_ls_grids_gives_each_grid_its_description(monkeypatch, capsys):
    from madara_cli.config import load_grid, options

    code, out, err = cli("ls", "grids", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    lines = dict(ln.split(": ", 1) for ln in out.splitlines() if ": " in ln)
    for name in options("grid"):
        assert lines[name] == " ".join(str(load_grid(name).description).split()), name


def test_shell_completion_knows_grids_and_override_values():
    import typer.main

    from madara_cli.cli import app
    from madara_cli.commands.options import complete_grid, complete_override

    assert "table2" in complete_grid("tab") and all(g.startswith("tab") for g in complete_grid("tab"))
    assert complete_override("strat") == ["strategy="]
    assert "strategy=pde" in complete_override("strategy=pd") and "strategy=nf" not in complete_override("strategy=pd")
    assert complete_override("nosuch=x") == []
    import click

    run = typer.main.get_command(app).commands["run"]
    ctx = click.Context(run)
    grid = next(p for p in run.params if p.name == "grid")
    over = next(p for p in run.params if p.name == "overrides")
    assert "table2" in [c.value for c in grid.shell_complete(ctx, "table")]
    assert "strategy=sda" in [c.value for c in over.shell_complete(ctx, "strategy=sd")]
