"""Packaging detail pyproject.toml cannot say: the top-level ``configs/`` folder ships
inside the wheel as ``madara_cli/configs`` (found by madara_cli.config.config_dir when
madara is installed from a wheel or a git URL). Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import find_packages, setup

groups = sorted(p.name for p in Path("configs").iterdir() if p.is_dir())
setup(
    packages=[*find_packages(include=["madara_cli*"]), "madara_cli.configs", *(f"madara_cli.configs.{g}" for g in groups)],
    package_dir={"madara_cli.configs": "configs", **{f"madara_cli.configs.{g}": f"configs/{g}" for g in groups}},
    package_data={"madara_cli.configs": ["*.yaml"], **{f"madara_cli.configs.{g}": ["*.yaml"] for g in groups}},
)
