"""The paper checked against itself: every number it derives from its other published
numbers, recomputed (``madara audit``). Reads only the paper's printed values; nothing in
:mod:`madara_cli.tables` imports it."""

from madara_cli.audit.checks import AuditRow, format_audit, published_diagnostics, run_audit

__all__ = ["AuditRow", "format_audit", "published_diagnostics", "run_audit"]
