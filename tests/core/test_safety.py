"""Safety: no eval/exec of config or model text, no unpickling of files the project
did not write, trust_remote_code off unless asked for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCES = sorted((ROOT / "madara_cli").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))


def _calls(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            yield node, owner, name


def test_sources_are_found():
    assert len(SOURCES) > 20


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_eval_exec_pickle_or_unsafe_yaml(path):
    bad = []
    for node, owner, name in _calls(path):
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if isinstance(node.func, ast.Name) and name in ("eval", "exec", "compile"):
            bad.append(f"{where} {name}()")
        if owner in ("pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve") and name in ("load", "loads", "open"):
            bad.append(f"{where} {owner}.{name}()")
        if owner == "torch" and name == "load":
            bad.append(f"{where} torch.load()")
        if owner == "yaml" and name in ("load", "unsafe_load", "full_load"):
            bad.append(f"{where} yaml.{name}() (use yaml.safe_load / OmegaConf.load)")
        if owner in ("np", "numpy") and name == "load":
            if any(k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False) for k in node.keywords):
                bad.append(f"{where} np.load(allow_pickle=...)")
        for k in node.keywords:
            if k.arg == "trust_remote_code" and not (isinstance(k.value, ast.Constant) and k.value.value is False):
                bad.append(f"{where} trust_remote_code={ast.unparse(k.value)}")
            if k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False):
                bad.append(f"{where} shell={ast.unparse(k.value)}")
    assert not bad, bad


def test_no_pickle_imports():
    pat = re.compile(r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|marshal|shelve)\b", re.M)
    hits = [str(p.relative_to(ROOT)) for p in SOURCES if pat.search(p.read_text(encoding="utf-8"))]
    assert not hits, hits


def test_np_load_never_allows_pickles_by_default():
    import inspect

    import numpy as np

    # numpy's default refuses object arrays (pickles); the project relies on that default.

    assert inspect.signature(np.load).parameters["allow_pickle"].default is False


def test_vllm_engine_does_not_trust_remote_code(fake_vllm):
    from madara_cli.backends import make_backend
    from madara_cli.composition import compose

    make_backend(compose(["backend=vllm", "model=qwen2.5-7b"]))
    seen = [engine.init_kwargs for engine in fake_vllm.engines]
    assert seen and seen[0].get("trust_remote_code", False) is False
    for name in ("qwen2.5-7b", "qwen3-8b", "gemma-2-9b", "llama-3.1-8b", "mistral-7b"):
        assert "trust_remote_code" not in compose([f"model={name}"]).model


def test_config_values_are_never_evaluated(tmp_path):
    """A Python expression in an override stays a string (OmegaConf does not evaluate it)."""
    from madara_cli.composition import compose

    marker = tmp_path / "pwned"
    cfg = compose([f"results_dir=\"__import__('os').mkdir('{marker}')\""])
    assert not marker.exists()
    assert "__import__" in cfg.results_dir
