"""Loaders that come from an installed package's ``madara.loaders`` entry point."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from madara_cli.config import compose
from madara_cli.data import loader_plugins
from madara_cli.data.loader_registry import LOADERS
from madara_cli.data.sources import DataError
from madara_cli.data.splits import load_all_examples

# ---------------------------------------------------------------------------
# Loaders from an installed package's entry point (madara.loaders)


@pytest.fixture
def fresh_registry(monkeypatch):
    """Loaders and entry points registered by a test stay inside it."""
    loader_plugins.load_all()
    monkeypatch.setattr(LOADERS, "_items", dict(LOADERS._items))
    monkeypatch.setattr(loader_plugins, "_LOADED_ENTRY_POINTS", set(loader_plugins._LOADED_ENTRY_POINTS))


def install_fake(site: Path, dist: str, entry: str, module: str, source: str) -> None:
    """What ``pip install`` leaves for a package with one ``madara.loaders`` entry point:
    its module and a ``<dist>-0.1.dist-info`` with METADATA and entry_points.txt."""
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[madara.loaders]\n{entry}\n", encoding="utf-8")


TOY_LOADER = '''
from madara_cli.data.loader_registry import LOADERS
from madara_cli.records import Doc, Example


@LOADERS.register("toy")
def load_toy(cfg):
    return [Example(id=f"toy-{i}", question=f"What is toy {i}?", answers=(f"answer {i}",),
                    docs=(Doc(id=f"toy-{i}-d0", text=f"Toy {i} is answer {i}."),)) for i in range(cfg.n_questions)]
'''


def test_a_loader_registers_from_an_entry_point(tmp_path, monkeypatch, fresh_registry):
    site, user = tmp_path / "site", tmp_path / "configs"
    site.mkdir()
    (user / "benchmark").mkdir(parents=True)
    install_fake(site, "toy_plugin", "toy = toy_loaders", "toy_loaders", TOY_LOADER)
    (user / "benchmark" / "toy.yaml").write_text("name: toy\ntask: factoid\nloader: toy\nn_questions: 3\nsample: null\ncalibration: 2\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(user))
    monkeypatch.delitem(sys.modules, "toy_loaders", raising=False)
    examples = load_all_examples(compose(["benchmark=toy"]).benchmark)
    assert [(ex.id, ex.answers) for ex in examples] == [("toy-0", ("answer 0",)), ("toy-1", ("answer 1",)), ("toy-2", ("answer 2",))]


def test_an_entry_point_callable_is_called_to_register(tmp_path, monkeypatch, fresh_registry):
    site = tmp_path / "site"
    site.mkdir()
    source = TOY_LOADER.replace('@LOADERS.register("toy")\n', "").replace("load_toy", "load_toy2")
    install_fake(site, "toy_callable", "toy2 = toy_callable_mod:register", "toy_callable_mod",
                 source + '\n\ndef register():\n    LOADERS.register("toy2")(load_toy2)\n')
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "toy_callable_mod", raising=False)
    assert [ex.id for ex in load_all_examples(compose(["benchmark=mini", "benchmark.loader=toy2", "benchmark.n_questions=2"]).benchmark)] == ["toy-0", "toy-1"]


@pytest.mark.parametrize(
    "entry, module, source, says",
    [
        ("gone = not_installed_anywhere", "unrelated_mod", "", "ModuleNotFoundError: No module named 'not_installed_anywhere'"),
        ("broken = broken_mod", "broken_mod", "raise RuntimeError('the plug-in\\nis broken')\n", "RuntimeError: the plug-in is broken"),
        ("taken = taken_mod", "taken_mod", "from madara_cli.data.loader_registry import LOADERS\nLOADERS.register('musique')(print)\n",
         "benchmark loader 'musique' is already registered"),
    ],
)
def test_a_broken_or_missing_plugin_is_one_line_naming_its_entry_point(tmp_path, monkeypatch, fresh_registry, entry, module, source, says):
    site = tmp_path / "site"
    site.mkdir()
    install_fake(site, f"dist_{module}", entry, module, source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(DataError) as e:
        load_all_examples(compose(["benchmark=mini"]).benchmark)
    msg = str(e.value)
    assert f"loader plug-in '{entry}' (entry point group madara.loaders) failed to load" in msg
    assert says in msg and "\n" not in msg


def test_an_unknown_loader_lists_the_known_ones():
    with pytest.raises(DataError) as e:
        load_all_examples(compose(["benchmark=mini", "benchmark.loader=nosuch"]).benchmark)
    msg = str(e.value)
    assert msg.startswith("unknown benchmark loader 'nosuch'; valid: ") and "musique" in msg and "madara.loaders" in msg
