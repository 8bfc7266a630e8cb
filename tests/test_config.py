"""Every config in configs/ composes against its schema; bad overrides fail clearly."""

from __future__ import annotations

import pytest

from madara_cli.config import GROUPS, ConfigError, compose, load_grid, options
from madara_cli.experiment.grid import Cell, grid_overrides


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    names = options(group)
    assert names, f"configs/{group}/ is empty"
    for name in names:
        cfg = compose([f"{group}={name}"])
        assert cfg[group].name == name, f"{group}/{name}.yaml must set name: {name}"


def test_paper_models_are_configured():
    paper = {
        "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
        "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3",
        "qwen3-8b": "Qwen/Qwen3-8B",
        "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
        "gemma-2-9b": "google/gemma-2-9b-it",
        "qwen2.5-14b": "Qwen/Qwen2.5-14B-Instruct",
        "gemma-2-27b": "google/gemma-2-27b-it",
        "qwen2.5-32b": "Qwen/Qwen2.5-32B-Instruct",
    }
    for name, hf_id in paper.items():
        m = compose([f"model={name}"]).model
        assert (m.hf_id, m.dtype, m.max_model_len, m.temperature) == (hf_id, "bfloat16", 4096, 0.6)


def test_every_grid_loads_and_expands():
    for name in options("grid"):
        grid = load_grid(name)
        cells = grid_overrides(grid, [])
        assert cells, f"grid {name} has no cells"


def test_unknown_model_names_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        compose(["model=no-such-model"])
    msg = str(e.value)
    assert "\n" not in msg and "smollm2-135m" in msg and "llama-3.1-8b" in msg


@pytest.mark.parametrize("bad", ["limt=3", "limit=abc", "model=[", "strategy.top_kk=3"])
def test_bad_overrides_are_one_line_config_errors(bad):
    with pytest.raises(ConfigError) as e:
        compose([bad])
    assert "\n" not in str(e.value)


def test_cell_key_changes_with_any_semantic_setting():
    a = Cell.from_cfg(compose(["limit=5"]))
    b = Cell.from_cfg(compose(["limit=5", "results_dir=/elsewhere"]))
    c = Cell.from_cfg(compose(["limit=5", "generation.max_tokens=16"]))
    assert a.key == b.key  # where results go is not what is measured
    assert a.key != c.key
    assert a.key.startswith("smollm2-135m__mini__nf__bm25s-k10__n5__s0__")
