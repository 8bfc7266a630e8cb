"""What a wheel knows about the commit it was built from (provenance's git_commit)."""

from __future__ import annotations

import json

from madara_cli.results import provenance


def test_a_wheel_reports_the_commit_stamped_at_build_time(tmp_path, monkeypatch):
    stamp = tmp_path / "build_info.json"
    stamp.write_text(json.dumps({"commit": "0123abc", "dirty": False}))
    assert provenance._build_info(stamp) == {"commit": "0123abc", "dirty": False, "source": "build"}
    stamp.write_text("{not json")
    assert provenance._build_info(stamp) is None
    assert provenance._build_info(tmp_path / "absent.json") is None


def test_setup_stamps_the_commit_into_the_built_package():
    """setup.py's build_py writes build_info.json; its git helper reads this checkout."""
    import importlib.util
    from pathlib import Path

    import setuptools

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("madara_setup", root / "setup.py")
    module = importlib.util.module_from_spec(spec)
    calls = {}
    real_setup = setuptools.setup
    setuptools.setup = lambda **kw: calls.update(kw)
    try:
        import os

        cwd = os.getcwd()
        os.chdir(root)
        try:
            spec.loader.exec_module(module)
        finally:
            os.chdir(cwd)
    finally:
        setuptools.setup = real_setup
    assert calls["cmdclass"]["build_py"] is module.BuildPyWithCommit
    if (root / ".git").exists():
        assert len(module._git("rev-parse", "HEAD") or "") == 40
