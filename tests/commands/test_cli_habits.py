"""Habits users bring from other runners: shell completion, lm-eval style flags, Hydra's
sweep functions, and Hydra settings madara would otherwise accept and ignore."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fakes import cli


def _one_line_error(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    return res.stderr


def test_shell_completion_is_on(tmp_path):
    script = cli("--show-completion", "bash")
    assert script.returncode == 0 and "_MADARA_COMPLETE" in script.stdout and "complete -o default -F _madara_completion madara" in script.stdout
    home = tmp_path / "home"
    home.mkdir()
    installed = cli("--install-completion", "bash", env={"HOME": str(home), "SHELL": "/bin/bash"})
    assert installed.returncode == 0, installed.stderr
    assert "_MADARA_COMPLETE" in "".join(p.read_text() for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("args, override", [
    (["--limit", "2"], "limit=2"),
    (["--limit=2"], "limit=2"),
    (["--seed", "3"], "seed=3"),
    (["--output_path", "out/x"], "results_dir=out/x"),
    (["--batch_size", "4"], "backend.batch_size=4"),
    (["--log_samples"], "log_samples=true"),
    (["--model", "qwen3-0.6b"], "model=qwen3-0.6b"),
])
def test_lm_eval_flags_answer_with_the_override(args, override):
    err = _one_line_error(cli("run", "strategy=nf", *args))
    assert f"write {override}" in err and args[0].split("=")[0] in err


def test_an_unknown_option_without_a_counterpart_lists_the_valid_ones():
    err = _one_line_error(cli("run", "--frobnicate"))
    assert "no such option --frobnicate; valid options:" in err and "--grid" in err


def _cfgs(res: subprocess.CompletedProcess) -> list[dict]:
    assert res.returncode == 0, res.stderr
    return list(yaml.safe_load_all(res.stdout))


def test_hydra_sweep_functions_work_with_multirun():
    globbed = _cfgs(cli("run", "--cfg", "job", "-m", "strategy=glob(pde*)", "limit=1"))
    assert [c["strategy"]["name"] for c in globbed] == ["pde", "pde_random", "pde_uniform"]
    ranged = _cfgs(cli("run", "--cfg", "job", "-m", "seed=range(0,3)", "limit=1"))
    assert [c["seed"] for c in ranged] == [0, 1, 2]
    chosen = _cfgs(cli("run", "--cfg", "job", "-m", "strategy=choice(nf,sda)", "strategy.top_k=range(3,5)", "limit=1"))
    assert [(c["strategy"]["name"], c["strategy"].get("top_k")) for c in chosen] == [("nf", None), ("sda", 3), ("sda", 4)]


def test_sweep_functions_that_cannot_be_enumerated_fail_in_one_line():
    err = _one_line_error(cli("run", "--cfg", "job", "-m", "model.temperature=interval(0,1)"))
    assert "interval" in err and "range(" in err
    err = _one_line_error(cli("run", "--cfg", "job", "-m", "strategy=glob(zzz*)"))
    assert "matches no strategy" in err and "pde" in err
    err = _one_line_error(cli("run", "--cfg", "job", "strategy=glob(pde*)"))
    assert "-m" in err


def test_hydra_settings_and_added_keys_are_refused_in_one_line():
    err = _one_line_error(cli("run", "--cfg", "job", "hydra.run.dir=/tmp/x"))
    assert "not honoured" in err and "results_dir=" in err
    err = _one_line_error(cli("run", "--cfg", "job", "+foo=1"))
    assert "'+foo=1' adds a setting madara does not read" in err and "limit" in err
    err = _one_line_error(cli("run", "--cfg", "job", "+model.quant=q4"))
    assert "valid model keys" in err
    err = _one_line_error(cli("run", "--cfg", "job", "+limit=2"))
    assert "without the '+': limit=2" in err
    err = _one_line_error(cli("plan", "--grid", "demo", "hydra.job.chdir=true"))
    assert "not honoured" in err
    ok = _cfgs(cli("run", "--cfg", "job", "++limit=2"))
    assert ok[0]["limit"] == 2


def test_launcher_settings_stay_allowed_with_a_launcher(tmp_path: Path):
    from madara_cli.commands.options import UserError, honoured

    assert honoured(["hydra.launcher.n_jobs=2", "+hydra.launcher.ray.remote.num_gpus=1"], "joblib")
    with pytest.raises(UserError, match="under --launcher joblib only hydra.launcher"):
        honoured(["hydra.sweep.dir=/x"], "joblib")
