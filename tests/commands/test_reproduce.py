"""`make reproduce`: the vLLM default stops at once when vLLM is absent; the CPU
version runs what it can, reports what it cannot, and writes tables and audit."""

from __future__ import annotations

import importlib.util

import pytest

from madara_cli.commands.reproduce_verbs import reproduce_all as reproduce
from madara_cli.experiment.runner import Failed
from tests.conftest import configs_with_grid
from tests.fakes import cli


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_default_stops_with_one_line():
    r = cli("reproduce")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "vLLM is not installed" in lines[0] and "BACKEND=llamacpp" in lines[0]


@pytest.mark.llm
def test_cpu_reproduce_runs_what_it_can(tmp_path, monkeypatch):
    env = configs_with_grid(tmp_path, "mini-repro", "axes:\n  model: [llama-3.1-8b]\n  benchmark: [mini, conflicts]\n  strategy: [nf]\noverrides: [limit=2]\n")
    monkeypatch.setenv("MADARA_CONFIGS", env["MADARA_CONFIGS"])
    results = tmp_path / "results"
    report = reproduce("llamacpp", ["smollm2-135m"], ["mini-repro"], str(results))
    assert report.finished == 1
    (failed,) = report.failed
    assert isinstance(failed, Failed) and "conflicts" in failed.label and "benchmark.path" in failed.reason
    assert any(p.name == "table1.md" for p in report.tables)
    assert "discrepancy" in report.audit
    assert list(results.glob("mini-repro/smollm2-135m__mini__nf__*/metrics.json"))
