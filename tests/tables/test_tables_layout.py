"""The tables package reads results and formats them; it never imports the audit (the
paper checked against itself), which sits above it."""

from __future__ import annotations

import ast
from pathlib import Path

import madara_cli.tables

TABLES_DIR = Path(madara_cli.tables.__file__).parent


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of every module (and imported name) a file's source imports,
    relative imports resolved against ``package``, the file's own package."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _audit_imports(path: Path) -> list[str]:
    package = ".".join(("madara_cli", *path.relative_to(TABLES_DIR.parent).parts[:-1]))
    names = imported_modules(path.read_text(encoding="utf-8"), package)
    return sorted(n for n in names if n == "madara_cli.audit" or n.startswith("madara_cli.audit."))


def test_import_scan_sees_every_form_of_importing_the_audit():
    forms = {
        "import madara_cli.audit": "madara_cli.audit",
        "import madara_cli.audit.checks as c": "madara_cli.audit.checks",
        "from madara_cli.audit import checks": "madara_cli.audit",
        "from madara_cli import audit": "madara_cli.audit",
        "from .. import audit": "madara_cli.audit",  # from madara_cli/tables/<file>.py
        "from ...audit.checks import run": "madara_cli.audit.checks",  # from madara_cli/tables/builders/<file>.py
        "def f():\n    from madara_cli.audit import checks": "madara_cli.audit",  # a lazy import
    }
    for source, expected in forms.items():
        package = "madara_cli.tables.builders" if source.startswith("from ...") else "madara_cli.tables"
        assert expected in imported_modules(source, package), source
    assert not {n for n in imported_modules("from madara_cli.tables import audit_notes", "madara_cli.tables") if n.startswith("madara_cli.audit")}


def test_no_tables_module_imports_the_audit():
    files = sorted(TABLES_DIR.rglob("*.py"))
    assert TABLES_DIR / "builders" / "main.py" in files  # the builders/ subpackage is scanned too
    offenders = {str(path.relative_to(TABLES_DIR)): found for path in files if (found := _audit_imports(path))}
    assert not offenders, f"tables must not import madara_cli.audit: {offenders}"
