"""Packaging detail pyproject.toml cannot say: the top-level ``configs/`` folder ships
inside the wheel as ``madara_cli/configs`` (found by madara_cli.config.config_dir when
madara is installed from a wheel or a git URL), the report page's template ships beside
its module, and the commit a wheel was built from
is stamped into it as ``madara_cli/build_info.json`` (read by
madara_cli.results.provenance.git_commit, since a wheel has no .git to ask).
Everything else is in pyproject.toml."""

import json
import subprocess
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20, cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


class BuildPyWithCommit(build_py):
    """build_py, then ``build_info.json`` (commit, dirty) beside the built package; a
    build outside a git checkout (an sdist) writes none, and provenance says so."""

    def run(self):
        super().run()
        commit = _git("rev-parse", "HEAD")
        if commit:
            status = _git("status", "--porcelain", "--untracked-files=no")
            info = {"commit": commit, "dirty": None if status is None else bool(status)}
            out = Path(self.build_lib) / "madara_cli" / "build_info.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(info) + "\n", encoding="utf-8")


# Every folder under configs/, nested ones too (the prompt sets: configs/prompts/<set>/*.txt).
groups = sorted(p.relative_to("configs").as_posix() for p in Path("configs").rglob("*") if p.is_dir())
setup(
    cmdclass={"build_py": BuildPyWithCommit},
    packages=[*find_packages(include=["madara_cli*"]), "madara_cli.configs", *(f"madara_cli.configs.{g.replace('/', '.')}" for g in groups)],
    package_dir={"madara_cli.configs": "configs", **{f"madara_cli.configs.{g.replace('/', '.')}": f"configs/{g}" for g in groups}},
    # The report page's jinja2 template (madara_cli/tables/report.py renders it).
    package_data={"madara_cli.tables": ["templates/*.j2"], "madara_cli.configs": ["*.yaml"], **{f"madara_cli.configs.{g.replace('/', '.')}": ["*.yaml", "*.txt"] for g in groups}},
)
