"""Packaging detail pyproject.toml cannot say: the top-level ``configs/`` folder ships
inside the wheel as ``madara_cli/configs`` (found by madara_cli.config.config_dir when
madara is installed from a wheel or a git URL). Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import find_packages, setup

# Every folder under configs/, nested ones too (the prompt sets: configs/prompts/<set>/*.txt).
groups = sorted(p.relative_to("configs").as_posix() for p in Path("configs").rglob("*") if p.is_dir())
setup(
    packages=[*find_packages(include=["madara_cli*"]), "madara_cli.configs", *(f"madara_cli.configs.{g.replace('/', '.')}" for g in groups)],
    package_dir={"madara_cli.configs": "configs", **{f"madara_cli.configs.{g.replace('/', '.')}": f"configs/{g}" for g in groups}},
    package_data={"madara_cli.configs": ["*.yaml"], **{f"madara_cli.configs.{g.replace('/', '.')}": ["*.yaml", "*.txt"] for g in groups}},
)
