"""Every config in configs/ composes against its schema; bad overrides fail clearly."""

from __future__ import annotations

import pytest

from madara_cli.composition import compose
from madara_cli.config import GROUPS, load_grid, options
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.grid import cell_from_cfg, grid_overrides


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
    a = cell_from_cfg(compose(["limit=5"]))
    b = cell_from_cfg(compose(["limit=5", "results_dir=/elsewhere"]))
    c = cell_from_cfg(compose(["limit=5", "generation.max_tokens=16"]))
    assert a.key == b.key  # where results go is not what is measured
    assert a.key != c.key
    assert a.key.startswith("smollm2-135m__mini__nf__bm25s-k10__n5__s0__")


# --- one schema per strategy ----------------------------------------------------------------


def test_a_setting_of_another_strategy_is_refused_naming_this_ones():
    with pytest.raises(ConfigError) as e:
        compose(["strategy=sda", "strategy.kappa=0.9"])
    assert str(e.value) == "strategy.kappa does not apply to strategy sda; its settings: name, top_k, weights, scoring, cot, conflict, rank_ties"
    with pytest.raises(ConfigError, match="strategy.top_k does not apply to strategy nf; its settings: name$"):
        compose(["strategy.top_k=3"])  # the default strategy, NF, keeps every document
    with pytest.raises(ConfigError, match="strategy.rrf_k does not apply to strategy madara"):
        compose(["strategy=madara", "strategy.rrf_k=3"])  # rrf is not one of madara's treatments
    assert compose(["strategy=atf", "strategy.kappa=0.9"]).strategy.kappa == 0.9


def test_each_strategy_node_holds_exactly_its_schema():
    from madara_cli.config import option_settings, strategy_settings

    for name in options("strategy"):
        node = compose([f"strategy={name}"]).strategy
        assert list(node) == strategy_settings(name) == option_settings(name), name


def test_choices_are_plain_strings_in_the_composed_config():
    import json

    cfg = compose(["strategy=pde", "strategy.scoring=logprob", "rsc.rescoring=logprob", "generation.style=oneshot"])
    for value in (cfg.strategy.scoring, cfg.strategy.vote, cfg.rsc.rescoring, cfg.generation.style, cfg.benchmark.task, cfg.model.dtype):
        assert type(value) is str
    assert cfg.strategy.scoring == "logprob" and str(cfg.rsc.rescoring) == "logprob" and f"{cfg.generation.style}" == "oneshot"
    assert "!!python" not in cfg.to_yaml()  # config.yaml of each cell
    plain = json.loads(json.dumps(cfg.to_dict()))
    assert plain["strategy"]["vote"] == "score" and plain["benchmark"]["calibration_split"] == "nested"


@pytest.mark.parametrize(
    "override,valid",
    [
        ("rsc.rescoring=bogus", "generate, logprob"),
        ("strategy.scoring=bogus", "generate, logprob"),
        ("strategy.vote=majority", "score, uniform"),
        ("strategy.selection=best", "assessed, random"),
        ("benchmark.task=qa", "factoid, fever"),
        ("benchmark.calibration_split=overlap", "nested, disjoint"),
        ("retriever.first_stage=grep", "bm25s, pyserini, dense"),
        ("generation.style=twoshot", "zeroshot, oneshot"),
        ("backend.tokenizer=bpe", "null, gguf, hf"),
    ],
)
def test_a_bad_choice_names_the_valid_values(override, valid):
    key, value = override.split("=")
    with pytest.raises(ConfigError) as e:
        # first_stage is rerank's setting, tokenizer openai's: each read in its own schema
        reader = {"retriever.first_stage": ["retriever=rerank"], "backend.tokenizer": ["backend=openai"]}.get(key, [])
        compose(["strategy=pde", *reader, override])
    assert str(e.value) == f"{key}='{value}' is not a valid choice; valid: {valid}"


def test_sda_cell_key_moves_with_its_own_settings_only():
    sda = cell_from_cfg(compose(["strategy=sda"])).key
    assert cell_from_cfg(compose(["strategy=sda", "strategy.top_k=3"])).key != sda
    assert cell_from_cfg(compose(["strategy=sda", "strategy.scoring=logprob"])).key != sda
    assert cell_from_cfg(compose(["strategy=sda", "strategy.top_k=5"])).key == sda  # the default, spelt out
    with pytest.raises(ConfigError, match="does not apply to strategy sda"):
        compose(["strategy=sda", "strategy.kappa=0.9"])  # so it cannot move sda's key


def test_a_grid_wide_strategy_setting_goes_where_it_applies():
    from madara_cli.config import GridConfig

    grid = GridConfig(name="g", axes={"strategy": ["nf", "sda", "self_consistency"]}, overrides=["strategy.scoring=logprob"])
    cells = {c[0]: c for c in grid_overrides(grid, ["strategy.n_samples=3"])}
    assert "strategy.scoring=logprob" in cells["strategy=sda"] and "strategy.n_samples=3" not in cells["strategy=sda"]
    assert "strategy.scoring=logprob" not in cells["strategy=nf"] and "strategy.n_samples=3" in cells["strategy=self_consistency"]
    nf = cell_from_cfg(compose(cells["strategy=nf"]))
    assert nf.key == cell_from_cfg(compose(["strategy=nf", "grid_name=g"])).key


@pytest.mark.parametrize(
    "axes,needle",
    [
        ({"strategy": ["sda"]}, "strategy.kappa does not apply to strategy sda; its settings: name, top_k, weights, scoring, cot, conflict, rank_ties"),
        ({"strategy": ["nf", "sda"]}, "strategy.kappa does not apply to any strategy of grid g (nf, sda)"),
        ({}, "strategy.kappa does not apply to strategy nf; its settings: name"),
    ],
)
def test_a_grid_setting_that_fits_none_of_its_strategies_is_one_line(axes, needle):
    from madara_cli.config import GridConfig

    with pytest.raises(ConfigError) as e:
        grid_overrides(GridConfig(name="g", axes=axes, overrides=["strategy.kappa=0.9"]), [])
    assert str(e.value) == needle


def test_swept_setting_of_another_strategy_does_not_duplicate_cells():
    from madara_cli.config import GridConfig

    cells = grid_overrides(GridConfig(name="g", axes={"strategy": ["nf", "atf"]}), ["strategy.kappa=0.5,1.0"])
    assert sorted(c[0] for c in cells) == ["strategy=atf", "strategy=atf", "strategy=nf"]


@pytest.mark.parametrize("name", ["nf", "three_agent", "cot", "sda", "sda_cot", "atf", "rrf", "pde", "pde_uniform", "pde_random",
                                  "self_consistency", "main_rag", "cross_encoder"])
def test_each_strategy_schema_is_what_its_code_reads(monkeypatch, tmp_path, name):
    """Read the code, not the yaml: run the strategy on the fake engine and record
    every setting it reads from ``ctx.strategy`` or its typed settings (``ctx.settings_as``);
    that is its schema, minus ``name``
    (the runner's). pde_random reads the scoring settings only when a score vote
    needs them, so it also runs with ``strategy.vote=score``."""
    import numpy as np

    from madara_cli.backends.cache import CachedLLM, ResponseCache
    from madara_cli.config import strategy_settings
    from madara_cli.data.mini import generate
    from madara_cli.strategies import StrategyContext, cross_encoder, strategy_fn
    from tests.fakes import FakeBackend

    reads: set[str] = set()

    class Recording:
        def __init__(self, node):
            self._node = node

        def __getattr__(self, key):
            reads.add(key)
            return getattr(self._node, key)

        def get(self, key, default=None):
            reads.add(key)
            return self._node.get(key, default)

        def __getitem__(self, key):
            reads.add(key)
            return self._node[key]

    monkeypatch.setattr(StrategyContext, "strategy", property(lambda self: Recording(self.cfg.strategy)))
    typed = StrategyContext.settings_as
    monkeypatch.setattr(StrategyContext, "settings_as", lambda self, schema: Recording(typed(self, schema)))
    monkeypatch.setattr(cross_encoder, "cross_encoder_scores", lambda model, pairs: np.arange(len(pairs), dtype=float))
    llm = CachedLLM(FakeBackend(), ResponseCache(tmp_path / "c.sqlite"))
    for extra in ([], ["strategy.vote=score"]) if name == "pde_random" else ([],):
        ctx = StrategyContext(llm=llm, cfg=compose([f"strategy={name}", *extra]))
        strategy_fn(name)(ctx, generate(4))
    assert reads - {"name"} == set(strategy_settings(name)) - {"name"}
