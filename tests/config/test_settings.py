"""`to_plain` reads the config's nodes directly (a plan makes several copies a cell); what
it returns is OmegaConf's own `to_container(resolve=True, enum_to_str=True)`, on every
shipped grid's cells and on the node kinds those do not hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

import pytest
from omegaconf import MISSING, OmegaConf

from madara_cli.config import options
from madara_cli.config.keys import to_plain


def _theirs(cfg):
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


@pytest.mark.parametrize("grid", options("grid"))
def test_every_shipped_grid_cell_reads_as_omegaconf_reads_it(grid, tmp_path):
    from madara_cli.experiment.grid import expand

    cfgs = expand(grid, [f"results_dir={tmp_path}"])
    for cfg in cfgs[:: max(1, len(cfgs) // 12)]:  # a spread of each grid's cells
        mine = to_plain(cfg)
        assert mine == _theirs(cfg)
        assert [type(v) for v in mine.values()] == [type(v) for v in _theirs(cfg).values()]
        for section in ("model", "strategy", "benchmark", "retriever", "backend"):
            assert to_plain(cfg[section]) == _theirs(cfg[section])


class Colour(Enum):
    RED = 1


@dataclass
class Inner:
    colour: Colour = Colour.RED
    maybe: Optional[dict] = None
    later: str = MISSING


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    items: list = field(default_factory=lambda: [1, {"a": "${seed}"}, None])
    seed: int = 3


def test_interpolations_enums_none_missing_and_lists_read_as_omegaconf_reads_them():
    cfg = OmegaConf.structured(Outer)
    OmegaConf.set_struct(cfg, False)  # a composed config's root takes keys its schema lacks, as here
    cfg = OmegaConf.merge(cfg, {
        "text": "run-${seed}-${inner.colour}", "copy": "${inner}", "alias": "${items}", "none": None, "gone": "???",
        "env": "${oc.env:MADARA_NOT_SET_ANYWHERE,fallback}", "nested": {"deep": {"x": "${seed}"}},
    })
    assert to_plain(cfg) == _theirs(cfg)
    assert to_plain(cfg)["copy"] == {"colour": "RED", "maybe": None, "later": "???"} and to_plain(cfg)["text"] == "run-3-Colour.RED"
    assert to_plain(OmegaConf.create([{"k": Colour.RED}, "${0}"])) == [{"k": "RED"}, {"k": "RED"}]
    assert to_plain(OmegaConf.create({Colour.RED: 1})) == {"RED": 1}


def test_an_interpolation_that_cannot_resolve_raises_as_omegaconf_raises_it():
    from omegaconf.errors import InterpolationKeyError

    cfg = OmegaConf.create({"a": "${nowhere}"})
    with pytest.raises(InterpolationKeyError) as theirs:
        _theirs(cfg)
    with pytest.raises(InterpolationKeyError) as mine:
        to_plain(cfg)
    assert str(mine.value) == str(theirs.value)
