"""Composing a grid fast (issue 38, "grids at scale"): Hydra's defaults step is made once
per distinct group choices and each cell's value overrides are laid over a copy. The
configs and the errors must be exactly those of composing each cell whole."""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from madara_cli.composition import compose, load_plugins
from madara_cli.config import load_grid
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.grid import grid_overrides

fast = importlib.import_module("madara_cli.composition.compose")


def _whole(monkeypatch):
    """Compose every cell the slow way: no remembered defaults step."""
    monkeypatch.setattr(fast, "_search_state", lambda head: None)
    monkeypatch.setattr(fast, "_interpolates", lambda container: True)
    monkeypatch.setattr(fast, "_cell_container", lambda *a: None)


def _cells() -> list[list[str]]:
    load_plugins()
    cells: list[list[str]] = []
    for grid, extra in (("demo-full", ["results_dir=/tmp/x", "seed=0,1"]), ("table2", ["backend=vllm", "limit=3"]),
                        ("demo", ["strategy.scoring=logprob", "generation.max_tokens=16", "retriever.k=3,4"])):
        cells += grid_overrides(load_grid(grid), extra)
    return cells + [
        ["strategy=three_agent", "limit=5", "model.temperature=0.3"],
        ["model=qwen2.5-7b", "backend=vllm", "backend.enforce_eager=true", "backend.kv_cache_gib=2"],
        ["retriever=rerank", "strategy=madara", "rsc.rescoring=logprob", "router.policy=isolation"],
        ["strategy=pde", "strategy.top_k=3", "reading=authors", "prompts=madara", "cache=/tmp/c.sqlite"],
        ["benchmark=jsonl", "benchmark.path=/tmp/q.jsonl", "+benchmark.sample=7"],
        ["strategy=nf", "seed=3", "grid_name=g${seed}"],  # an interpolation: resolved
        ["strategy=nf", "seed=4", "grid_name=g${seed}"],
    ]


def test_a_grid_composes_byte_for_byte_as_each_cell_whole(monkeypatch):
    cells = _cells()
    monkeypatch.setattr(fast, "_BASES", {})  # what earlier tests composed is not this grid's
    quick = [compose(o).to_yaml() for o in cells]
    assert len(fast._BASES) < len(cells)  # the defaults step was shared
    assert compose(cells[-1]).to_yaml().count("grid_name: g4") == 1
    _whole(monkeypatch)
    assert [compose(o).to_yaml() for o in cells] == quick


# Cells whose value overrides meet: one key given twice, a key another's value
# interpolates, a key one value interpolates beside it, a free group's added settings.
MEETING = [
    ["strategy=nf", "limit=1", "limit=2"],
    ["strategy=nf", "results_dir=/tmp/a", "cache=/tmp/b.sqlite"],
    ["strategy=nf", "cache=/tmp/b.sqlite", "results_dir=/tmp/a"],  # set alone, results_dir would move cache too
    ["strategy=nf", "seed=5", "grid_name=g${seed}", "limit=2"],
    ["backend=vllm", "backend.enforce_eager=true", "backend.kv_cache_gib=2", "seed=1"],
    ["strategy=pde", "strategy.top_k=3", "strategy.top_k=4", "seed=2"],
    ["strategy=pde", "prompts=madara", "strategy.top_k=2"],
    # a value the first base holds already, set over a base that holds another
    ["reading=authors", "strategy=nf", "generation.max_tokens=64"],
    ["strategy=nf", "generation.max_tokens=64"],
    ["strategy=sda", "seed=1"],
    ["strategy=sda", "seed=1", "results_dir=/tmp/a"],
    # values of one key worked out from another of its type (an int setting given an
    # int or null, a float setting given a float, then an int it converts)
    ["strategy=nf", "seed=7"], ["strategy=pde", "seed=8"], ["strategy=nf", "limit=null"], ["strategy=nf", "limit=4"],
    ["strategy=nf", "model.temperature=0.5"], ["strategy=nf", "model.temperature=0.7"],
    ["strategy=nf", "model.temperature=1"], ["strategy=nf", "model.temperature=2"],
    ["strategy=nf", "grid_name=a"], ["strategy=nf", "grid_name=b"], ["strategy=nf", "results_dir=/tmp/c"],
]


def test_a_value_axis_composes_one_part_per_key_not_per_value(monkeypatch):
    """seed=range(0,40) over two strategies: each value's changes are the value itself,
    worked out from the first one composed (not one composition per value)."""
    monkeypatch.setattr(fast, "_CELL_BASES", {})
    monkeypatch.setattr(fast, "_CELL_CHANGES", {})
    monkeypatch.setattr(fast, "_LIKE", {})
    parts = []
    real = fast._quiet_container
    monkeypatch.setattr(fast, "_quiet_container", lambda *a: parts.append(a[1]) or real(*a))
    cells = [[f"strategy={s}", f"seed={i}"] for s in ("nf", "pde") for i in range(40)]
    with fast.held_state():
        quick = [compose(o).to_yaml() for o in cells]
    assert len(parts) <= 4  # two bases, and seed worked out once
    assert "seed: 39" in quick[39] and "seed: 39" in quick[79]
    _whole(monkeypatch)
    assert [compose(o).to_yaml() for o in cells] == quick



def test_a_grid_held_composes_byte_for_byte_as_each_cell_whole(monkeypatch):
    """Inside a grid (held_state) a cell is made from its group choices' base and each
    value override's own changes; it must be what composing it whole gives."""
    cells = _cells() + MEETING
    monkeypatch.setattr(fast, "_CELL_BASES", {})
    monkeypatch.setattr(fast, "_CELL_CHANGES", {})
    made = []
    real = fast._cell_container

    def counted(*a):
        out = real(*a)
        made.append(out is not None)
        return out

    monkeypatch.setattr(fast, "_cell_container", counted)
    with fast.held_state():
        quick = [compose(o).to_yaml() for o in cells]
    assert sum(made) > len(cells) // 2  # most cells were made from their parts
    assert not all(made)  # and the meeting ones were composed whole
    _whole(monkeypatch)
    assert [compose(o).to_yaml() for o in cells] == quick


@pytest.mark.parametrize("bad", [
    ["strategy=pde", "strategy.top_k=abc"],
    ["limit=-1"],
    ["backend.nonexistent=1"],
    ["model=nope"],
    ["strategy=nf", "+strategy.bogus=1"],
    ["seed=x"],
    ["generation.max_tokens=0"],
])
def test_a_bad_cell_is_refused_with_the_same_line(monkeypatch, bad):
    compose(["strategy=pde"])  # the defaults step of a neighbour is remembered
    with pytest.raises(ConfigError) as quick:
        compose(bad)
    with fast.held_state(), pytest.raises(ConfigError) as held:  # inside a grid, from parts
        compose(["strategy=pde", "seed=1"])
        compose(bad)
    assert str(held.value) == str(quick.value)
    _whole(monkeypatch)
    with pytest.raises(ConfigError) as whole:
        compose(bad)
    assert str(quick.value) == str(whole.value)


def test_an_edited_option_file_is_read_again(tmp_path, monkeypatch):
    """The remembered step is keyed by every config file's stamp: editing a yaml of a
    --config-dir (here with the two-second guard for fresh files off) composes anew."""
    monkeypatch.setattr(fast, "_RACY_S", 0.0)
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    (tmp_path / "model").mkdir()
    option = tmp_path / "model" / "mine.yaml"
    option.write_text("name: mine\nhf_id: a/b\ntemperature: 0.1\n")
    assert compose(["model=mine", "strategy=nf"]).model.temperature == 0.1
    option.write_text("name: mine\nhf_id: a/b\ntemperature: 0.25\n")
    assert compose(["model=mine", "strategy=nf"]).model.temperature == 0.25


def test_request_keys_are_what_they_were():
    """canonical() is built directly now (hashing a request was mostly dataclasses.asdict):
    the same dict as asdict gave, so no cache key moves."""
    from madara_cli.config.identity import digest, request_key
    from madara_cli.core.records import ChatRequest, Message, ScoreRequest

    msgs = (Message("system", "Be brief. ü"), Message("user", "Who founded Varn?"))
    for r, legacy in (
        (ChatRequest(msgs, max_tokens=32, temperature=0.6, seed=3, stop=("}",)), None),
        (ChatRequest(msgs, prefix='{"score": '), None),
        (ScoreRequest(msgs, ("0", "1", "2"), prefix="Score: "), "score"),
    ):
        body = asdict(r)
        if legacy is None and not body["prefix"]:
            del body["prefix"]
        old = {"kind": legacy or "chat", **body}
        assert r.canonical() == old
        assert request_key("fp", r) == digest({"model": "fp", "request": old}, 64, ascii=False)


def test_a_score_requests_key_is_kept_by_value_and_a_chat_requests_never():
    """Score requests (text only, no seed) repeat cell after cell of a grid: their keys are
    kept by value, and a kept key is the one hashing gives, per engine. Chat requests are
    hashed each time: 1 == 1.0 and 0.0 == -0.0 while their JSON, and so their keys, differ."""
    from madara_cli.config import identity
    from madara_cli.config.identity import digest, request_key
    from madara_cli.core.records import ChatRequest, Message, ScoreRequest

    def hashed(fp, r):
        return digest({"model": fp, "request": r.canonical()}, 64, ascii=False)

    msgs = (Message("system", "Score it."), Message("user", "Document: ü"))
    identity._score_key.cache_clear()
    first = request_key("fp-a", ScoreRequest(msgs, ("0", "1"), prefix="{"))
    again = ScoreRequest((Message("system", "Score it."), Message("user", "Document: ü")), ("0", "1"), prefix="{")  # equal, not the same
    assert first == request_key("fp-a", again) == hashed("fp-a", again)
    assert request_key("fp-b", again) == hashed("fp-b", again) != first
    assert request_key("fp-a", ScoreRequest(msgs, ("0", "1"), prefix="")) != first
    hits = identity._score_key.cache_info().hits
    request_key("fp-a", again)
    assert identity._score_key.cache_info().hits == hits + 1  # kept, by value
    kept = identity._score_key.cache_info().maxsize
    for _ in range(kept + 5):  # bounded
        request_key("fp-a", ScoreRequest(msgs, (str(_),)))
    assert identity._score_key.cache_info().currsize <= kept
    one, one_float = ChatRequest(msgs, temperature=1), ChatRequest(msgs, temperature=1.0)
    assert one == one_float and request_key("fp", one) == hashed("fp", one) != request_key("fp", one_float) == hashed("fp", one_float)


def test_a_grid_with_a_config_dir_shares_the_defaults_step(tmp_path, monkeypatch):
    """With a --config-dir, Hydra's primary folder is a scratch copy of config.yaml written
    when the first cell composes. Stamped as a file of the search path, it was always
    "just changed", so every cell of the grid was composed whole (a 1,000-cell plan took
    311 s, not the 50 s the compose bench showed)."""
    import time

    from madara_cli.config import folders

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("name: mine\nhf_id: a/b\ntemperature: 0.1\n")
    time.sleep(fast._RACY_S + 0.2)  # the user's files are settled; the scratch copy is made below
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(folders, "_PRIMARY_COPIES", {})
    monkeypatch.setattr(fast, "_BASES", {})
    whole = []
    monkeypatch.setattr(fast, "_hydra_once", lambda o, real=fast._hydra_once: whole.append(o) or real(o))
    with fast.held_state():
        cfgs = [compose(["model=mine", "strategy=nf", f"seed={s}"]) for s in range(5)]
    assert [c.seed for c in cfgs] == list(range(5))
    assert len(whole) == 1  # one defaults step for the five cells


def test_an_edited_root_config_is_copied_again(tmp_path, monkeypatch):
    """The scratch primary follows the config.yaml it copies."""
    monkeypatch.setattr(fast, "_RACY_S", 0.0)
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    shipped = (Path(fast.__file__).parents[2] / "configs" / "config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(shipped.replace("seed: 0", "seed: 7"))
    assert compose(["strategy=nf"]).seed == 7
    (tmp_path / "config.yaml").write_text(shipped.replace("seed: 0", "seed: 11"))
    assert compose(["strategy=nf"]).seed == 11


def test_a_clone_is_a_deepcopy():
    """The fast copy of a composed config is what copy.deepcopy makes: the same YAML, the
    same node types (a typed setting still refuses a wrong value), flags and values its
    own, parents its own (an interpolation resolves inside the copy)."""
    import copy

    from omegaconf.errors import ConfigAttributeError, ValidationError

    from madara_cli.config.schema import register_schemas

    register_schemas()
    typed = OmegaConf.merge(OmegaConf.structured(fast._require_schema("strategy", "pde")), {"top_k": 4})
    cfg = OmegaConf.create({"strategy": typed, "seed": 3, "echo": "${seed}", "xs": [1, {"a": 2}], "none": None})
    OmegaConf.set_struct(cfg, True)
    clone, deep = fast._clone(cfg), copy.deepcopy(cfg)
    assert OmegaConf.to_yaml(clone) == OmegaConf.to_yaml(deep) == OmegaConf.to_yaml(cfg)
    assert {k: type(clone.strategy._get_node(k)) for k in clone.strategy} == {k: type(deep.strategy._get_node(k)) for k in deep.strategy}
    assert OmegaConf.get_type(clone.strategy) is OmegaConf.get_type(deep.strategy)
    with pytest.raises(ValidationError):
        clone.strategy.top_k = "many"
    with pytest.raises(ConfigAttributeError):  # struct mode came along
        clone.unknown = 1
    clone.seed = 9
    assert clone.echo == 9 and cfg.echo == 3  # the interpolation reads the clone's own parent
    clone.xs[1].a = 5
    assert cfg.xs[1].a == 2
    OmegaConf.set_struct(clone, False)
    clone.unknown = 1
    with pytest.raises(ConfigAttributeError):
        cfg.unknown = 1  # the original's flags are its own
    assert clone.xs._get_parent() is clone and clone.strategy._get_parent() is clone
