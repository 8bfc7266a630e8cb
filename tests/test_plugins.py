"""Plugins: a backend, a retriever setting and a strategy that exist outside the
package, found through ``--include``, ``--config-dir`` and entry points, and the
per-option schemas that refuse settings the chosen option does not read."""

from __future__ import annotations

import csv
import json
import sys
import textwrap
from pathlib import Path

import pytest

from madara_cli.config import ConfigError, compose
from tests.conftest import ROOT

PLUGINS = ROOT / "tests" / "plugins"  # toy_backend.py


def madara(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """The CLI entry point in process; (exit code, stdout, stderr). The folders that
    --config-dir and --include put in the environment are undone after the test."""
    from madara_cli import cli

    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    monkeypatch.setenv("MADARA_INCLUDE", "")
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(sys, "argv", ["madara", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    cap = capsys.readouterr()
    return int(e.value.code or 0), cap.out, cap.err


def one_line(code: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_engine(monkeypatch):
    """Fail if anything builds an engine: the checks must come before."""
    import madara_cli.backends as backends

    def refuse(name):
        raise AssertionError(f"engine {name} was looked up before the config was checked")

    monkeypatch.setattr(backends, "backend_spec", refuse)


@pytest.fixture
def toy_configs(tmp_path: Path) -> Path:
    d = tmp_path / "configs"
    (d / "backend").mkdir(parents=True)
    (d / "backend" / "toy.yaml").write_text("name: toy\nbatch_size: 4\nreply: Varnholt\n")
    (d / "grid").mkdir()
    (d / "grid" / "toygrid.yaml").write_text("name: toygrid\naxes:\n  strategy: [nf]\noverrides: [backend=toy, benchmark=mini, limit=2]\n")
    return d


# --------------------------------------------------------------------------- #
# Per-option schemas, enforced at compose
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "args, line",
    [
        (["backend=llamacpp", "backend.base_url=http://x"], "backend.base_url does not apply to backend llamacpp; its settings: name, batch_size, n_threads, n_ctx"),
        (["backend=vllm", "backend.n_threads=4"], "backend.n_threads does not apply to backend vllm; its settings: name, batch_size, tensor_parallel_size"),
        (["backend=openai", "backend.tensor_parallel_size=4"], "backend.tensor_parallel_size does not apply to backend openai; its settings: name, batch_size, base_url"),
        (["retriever=bm25s", "retriever.candidates=7"], "retriever.candidates does not apply to retriever bm25s; its settings: name, k, k1, b, stemmer, stopwords, index"),
        (["retriever=dense", "retriever.k1=1.2"], "retriever.k1 does not apply to retriever dense; its settings: name, k, index, encoder"),
    ],
)
def test_a_setting_the_chosen_option_lacks_stops_in_one_line(monkeypatch, capsys, no_engine, tmp_path, args, line):
    code, _, err = madara(monkeypatch, capsys, "run", *args, "limit=1", f"results_dir={tmp_path}")
    assert line in one_line(code, err)
    assert not (tmp_path / "adhoc").exists()


def test_settings_an_option_reads_still_compose():
    assert compose(["backend=vllm", "backend.tensor_parallel_size=2"]).backend.tensor_parallel_size == 2
    assert compose(["backend=llamacpp", "backend.n_threads=1"]).backend.n_threads == 1
    assert compose(["retriever=rerank", "retriever.candidates=20"]).retriever.candidates == 20
    assert "candidates" not in compose(["retriever=bm25s"]).retriever
    with pytest.raises(ConfigError, match=r"backend.n_threads: expected an integer or null, got 'many'"):
        compose(["backend.n_threads=many"])


def test_shipped_keys_lay_over_the_old_flat_settings():
    """A backend or retriever node holds only its own settings, but what the keys
    cover is exactly what they covered when every node carried every setting."""
    from madara_cli.config.plugins import key_view

    assert key_view("backend", dict(compose([]).backend)) == {"name": "llamacpp", "n_ctx": None, "served_model_name": None, "tokenizer": None}
    assert key_view("backend", dict(compose(["backend=vllm"]).backend)) == {"name": "vllm", "n_ctx": None, "served_model_name": None, "tokenizer": None}
    flat = {"name": "dense", "k": 10, "k1": 0.9, "b": 0.4, "stemmer": "english", "stopwords": "en", "index": None,
            "encoder": "facebook/contriever-msmarco", "first_stage": "bm25s", "candidates": 50, "model": None}
    assert key_view("retriever", dict(compose(["retriever=dense"]).retriever)) == flat


# Cell and probe keys computed at commit 62abdde, before backends and retrievers had a
# schema each (tools: Cell.from_cfg, ProbeSpec.from_cfg).
KEYS_BEFORE = [
    (["strategy=nf", "limit=5", "grid_name=demo"], "smollm2-135m__mini__nf__bm25s-k10__n5__s0__68e1147a", "smollm2-135m__mini__n4__bfae2e7a"),
    (["backend=llamacpp", "backend.n_threads=3"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__57347540", "smollm2-135m__mini__n20__15dc292a"),
    (["backend=vllm"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__c364ee31", "smollm2-135m__mini__n20__f87b7b60"),
    (["backend=openai"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__bf52241d", "smollm2-135m__mini__n20__51dc230a"),
    (["backend=openai", "backend.n_ctx=2048"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__8f17eec0", "smollm2-135m__mini__n20__544f8e4a"),
    (["retriever=dense"], "smollm2-135m__mini__nf__dense-k10__nall__s0__8f8386d4", "smollm2-135m__mini__n20__76870d5a"),
    (["retriever=pyserini"], "smollm2-135m__mini__nf__pyserini-k10__nall__s0__b35b0246", "smollm2-135m__mini__n20__b5c08af7"),
    (["retriever=rerank", "retriever.candidates=20"], "smollm2-135m__mini__nf__rerank-k10__nall__s0__0d0b6e65", "smollm2-135m__mini__n20__f64d9dd8"),
    (["strategy=madara"], "smollm2-135m__mini__madara__bm25s-k10__nall__s0__409d0822", "smollm2-135m__mini__n20__15dc292a"),
]


@pytest.mark.parametrize("overrides, cell_key, probe_key", KEYS_BEFORE)
def test_shipped_cell_and_probe_keys_do_not_move(overrides, cell_key, probe_key):
    from madara_cli.diagnose.probe import ProbeSpec
    from madara_cli.experiment.grid import Cell

    if "grid_name=demo" in overrides:  # the demo grid's first cell, as the grid composes it
        from madara_cli.experiment.grid import expand

        cfg = expand("demo")[0]
    else:
        cfg = compose(overrides)
    assert Cell.from_cfg(cfg).key == cell_key
    assert ProbeSpec.from_cfg(cfg).key == probe_key
