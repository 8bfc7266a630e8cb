"""madara installed from its wheel (not editable) finds its configs and runs a cell from
any folder: the wheel is built, installed with --no-deps into a fresh venv that borrows
this interpreter's dependencies, and driven from an unrelated working directory."""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps``; without build isolation when this interpreter already
    has setuptools and wheel (offline CI), else pip fetches the build backend."""
    offline = importlib.util.find_spec("setuptools") is not None and importlib.util.find_spec("wheel") is not None
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    proc = subprocess.run(cmd + (["--no-build-isolation"] if offline else []), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("madara-*.whl")
    return wheel


def _fresh_venv(path: Path) -> Path:
    """A venv whose own site-packages comes first and whose .pth appends this
    interpreter's site-packages (so dependencies resolve, but this checkout and any
    editable madara of the parent stay out: .pth files inside it are not processed)."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    py = path / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    parents = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])
    Path(purelib, "_madara_parent_deps.pth").write_text("\n".join(p for p in parents if Path(p).is_dir()) + "\n")
    return py


@pytest.mark.slow
def test_wheel_installs_and_runs_from_anywhere(tmp_path):
    wheel = _build_wheel(tmp_path / "dist")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "madara_cli/configs/config.yaml" in names and "madara_cli/configs/grid/demo.yaml" in names
    assert "madara_cli/configs/prompts/madara/relevance_system.txt" in names  # the shipped prompt set
    assert "madara_cli/tables/templates/report.html.j2" in names  # the report page's template

    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MADARA_CONFIGS", "MADARA_CONFIG_DIR", "MADARA_RESULTS", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    py = _fresh_venv(tmp_path / "venv")
    # --ignore-installed: an editable madara in the parent's site-packages must neither
    # satisfy the requirement nor be uninstalled.
    inst = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=elsewhere)
    assert inst.returncode == 0, inst.stderr[-3000:]
    madara = str(py.parent / "madara")

    where = subprocess.run([str(py), "-c", "import madara_cli.config as c; print(c.__file__); print(c.config_dir())"],
                           capture_output=True, text=True, cwd=elsewhere, env=env, check=True).stdout.split()
    assert str(tmp_path / "venv") in where[0], f"madara_cli came from {where[0]}, not the installed wheel"
    assert where[1].endswith(os.path.join("madara_cli", "configs")) and str(ROOT) not in where[1]

    ls = subprocess.run([madara, "ls"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300)
    assert ls.returncode == 0, ls.stderr
    assert "smollm2-135m" in ls.stdout and "table2" in ls.stdout and "nf" in ls.stdout

    # --config-dir adds a user's own option to a shipped group.
    user = tmp_path / "my-configs" / "strategy"
    user.mkdir(parents=True)
    (user / "nf_short.yaml").write_text("name: nf\ntop_k: 3\n")
    ls2 = subprocess.run([madara, "--config-dir", str(user.parent), "ls", "strategies"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300)
    assert ls2.returncode == 0 and "nf_short" in ls2.stdout, ls2.stderr

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python not installed: the wheel lists its configs, the cell needs the cpu extra")
    cell = subprocess.run(
        [madara, "run", "benchmark=mini", "strategy=nf", "limit=1", "backend.n_threads=1", "results_dir=out"],
        capture_output=True, text=True, cwd=elsewhere, env=env, timeout=900,
    )
    assert cell.returncode == 0, cell.stderr[-3000:]
    (metrics,) = (elsewhere / "out").glob("*/*/metrics.json")
    m = json.loads(metrics.read_text())
    assert m["n"] == 1
    assert m["provenance"]["madara_version"] and "overrides" in m["provenance"]
