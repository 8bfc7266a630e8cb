"""The plain cell (config/settings.py): composition hands on a frozen record of plain values.
It reads as OmegaConf read the config it replaced, on every shipped grid's cells; its
config.yaml reads back to the same record (and so the same key); it cannot be changed in
place; a changed copy is a new record. ``to_plain`` still reads an OmegaConf config
(a config a user composed themselves) as OmegaConf does."""

from __future__ import annotations

import pickle
from enum import Enum

import pytest
from omegaconf import OmegaConf

from madara_cli.config import options
from madara_cli.config.settings import Node, Settings, as_settings, to_plain


def _theirs(cfg):
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


@pytest.mark.parametrize("grid", options("grid"))
def test_every_shipped_grid_cell_reads_as_omegaconf_reads_it(grid, tmp_path):
    from madara_cli.config.identity import identify
    from madara_cli.experiment.grid import expand

    cfgs = expand(grid, [f"results_dir={tmp_path}"])
    for cfg in cfgs[:: max(1, len(cfgs) // 12)]:  # a spread of each grid's cells
        assert isinstance(cfg, Settings)
        theirs = _theirs(OmegaConf.create(cfg.to_yaml()))  # what OmegaConf reads of the cell's config.yaml
        mine = to_plain(cfg)
        assert mine == theirs
        assert [type(v) for v in mine.values()] == [type(v) for v in theirs.values()]
        again = as_settings(OmegaConf.create(cfg.to_yaml()))
        assert again == cfg and identify(again).cell.key == identify(cfg).cell.key


def test_a_cell_is_frozen_and_a_changed_copy_is_a_new_record():
    cfg = Settings({"seed": 0, "strategy": {"name": "pde", "top_k": 5, "weights": [0.4, 0.3, 0.3]}, "limit": None})
    with pytest.raises(TypeError, match="frozen"):
        cfg.seed = 1
    with pytest.raises(TypeError):
        cfg.strategy["top_k"] = 3  # type: ignore[index]
    assert cfg.strategy.weights == (0.4, 0.3, 0.3) and cfg.to_dict()["strategy"]["weights"] == [0.4, 0.3, 0.3]
    with pytest.raises(AttributeError, match="no setting 'topk'.*top_k"):
        _ = cfg.strategy.topk
    assert cfg.strategy.get("topk", 7) == 7 and "top_k" in cfg.strategy and cfg.get("limit") is None
    merged = cfg.merged({"strategy": {"top_k": 3}, "limit": 2})
    assert merged.strategy.top_k == 3 and merged.strategy.name == "pde" and merged.limit == 2
    assert cfg.strategy.top_k == 5 and cfg.limit is None  # the original is as it was
    replaced = cfg.replace(strategy={"name": "nf"})
    assert replaced.strategy.to_dict() == {"name": "nf"} and isinstance(replaced, Settings)
    assert pickle.loads(pickle.dumps(merged)) == merged  # plan walkers hand cells between processes
    assert hash(Node({"a": [1, {"b": 2}]})) == hash(Node({"a": (1, {"b": 2})}))
    assert as_settings(cfg) is cfg and as_settings({"seed": 1}).seed == 1


def test_a_composed_cell_is_plain_strings_and_numbers():
    from madara_cli.composition import compose

    cfg = compose(["strategy=pde", "strategy.scoring=logprob"])
    assert type(cfg) is Settings and type(cfg.strategy) is Node
    assert type(cfg.strategy.scoring) is str and type(cfg.strategy.top_k) is int
    with pytest.raises(TypeError):
        cfg.strategy.top_k = 3


class Colour(Enum):
    RED = 1


def test_an_omegaconf_config_reads_as_omegaconf_reads_it():
    cfg = OmegaConf.create({"seed": 3, "text": "run-${seed}", "copy": "${nested}", "nested": {"x": "${seed}"},
                            "gone": "???", "none": None, "items": [1, {"k": Colour.RED}]})
    assert to_plain(cfg) == _theirs(cfg)
    assert as_settings(cfg).to_dict() == _theirs(cfg)
    assert to_plain(cfg)["copy"] == {"x": 3} and to_plain(cfg)["items"][1] == {"k": "RED"}


def test_omegaconf_stays_at_the_composition_edge():
    """Only composition, the config room (schemas, config files, the plain cell's edge) and the
    guarded YAML reader import OmegaConf; everything downstream reads the plain cell."""
    import ast
    from pathlib import Path

    import madara_cli

    root = Path(madara_cli.__file__).parent
    allowed = ("composition/", "config/", "core/sidefiles.py")
    importers = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "omegaconf" or n.startswith("omegaconf.") for n in names):
                importers.add(rel)
    assert importers and not {r for r in importers if not r.startswith(allowed)}, sorted(importers)
