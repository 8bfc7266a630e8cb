"""Every CLI call in the tests goes through :func:`tests.fakes.cli` (or its
:func:`~tests.fakes.spawn`): one place builds the command line and the child's
environment, so a change to how madara is started is made once. And the tests keep their
layout: one folder per package of madara_cli plus e2e/, shared helpers at the top."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ENTRY_MODULE = "madara_cli.cli"


def _own_cli_calls(path: Path, root: Path = TESTS.parent) -> list[str]:
    """Where ``path`` starts the CLI itself: the entry module named as a string (a spawn),
    ``cli.main()`` called, ``main`` imported from the entry module, or a string of Python
    code that calls it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value == ENTRY_MODULE or "cli.main(" in node.value:
                found.append(f"{where}: {node.value[:60]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "main":
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id == "cli") or (isinstance(owner, ast.Attribute) and owner.attr == "cli"):
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module == ENTRY_MODULE and any(a.name == "main" for a in node.names):
            found.append(f"{where}: from {ENTRY_MODULE} import main")
    return found


def test_no_test_starts_the_cli_on_its_own():
    files = [p for p in TESTS.rglob("*.py") if p.name != "fakes.py" and p != Path(__file__).resolve()]
    assert len(files) > 50
    found = [hit for p in files for hit in _own_cli_calls(p)]
    assert not found, "call tests.fakes.cli / spawn instead:\n" + "\n".join(found)


def test_the_check_catches_each_form(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-m', '{ENTRY_MODULE}', 'ls'])\n"
        "from madara_cli import cli\ncli.main()\n"
        f"from {ENTRY_MODULE} import main\n"
        "CODE = 'from madara_cli import cli; cli.main()'\n"
    )
    assert len(_own_cli_calls(sample, tmp_path)) == 4


def test_test_files_sit_in_a_package_folder_or_e2e():
    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "put a test file in the folder of the package it tests"
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    packages = {p.name for p in (TESTS.parent / "madara_cli").iterdir() if (p / "__init__.py").is_file()}
    assert folders <= packages | {"core", "commands", "e2e"}, folders - packages
    assert all((TESTS / f / "__init__.py").is_file() for f in folders), "each folder is a package: module names stay unique"
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), "test file names stay unique across folders"
