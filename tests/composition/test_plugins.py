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

from madara_cli.composition import compose
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.grid import cell_from_cfg
from tests.conftest import ROOT
from tests.fakes import cli

PLUGINS = ROOT / "tests" / "plugins"  # toy_backend.py


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    """Tables as wide as the longest plugin line (the CLI runs in process here)."""
    monkeypatch.setenv("COLUMNS", "250")


def one_line(code: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_engine(monkeypatch):
    """Fail if anything builds an engine: the checks must come before."""
    from madara_cli.plugins.catalog import CATALOG

    real = CATALOG.get

    def refuse(kind, name):
        if kind == "backend":
            raise AssertionError(f"engine {name} was looked up before the config was checked")
        return real(kind, name)

    monkeypatch.setattr(CATALOG, "get", refuse)


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
    code, _, err = cli("run", *args, "limit=1", f"results_dir={tmp_path}", monkeypatch=monkeypatch, capsys=capsys)
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
    from madara_cli.config.keys import key_view

    assert key_view("backend", dict(compose([]).backend)) == {"name": "llamacpp", "n_ctx": None, "served_model_name": None, "tokenizer": None}
    from madara_cli.config.keys import keyed

    # vLLM's later settings (tokenizer_mode, dtype) leave the key at their defaults
    assert keyed("backend", key_view("backend", dict(compose(["backend=vllm"]).backend))) == {
        "name": "vllm", "n_ctx": None, "served_model_name": None, "tokenizer": None}
    flat = {"name": "dense", "k": 10, "k1": 0.9, "b": 0.4, "stemmer": "english", "stopwords": "en", "index": None,
            "encoder": "facebook/contriever-msmarco", "first_stage": "bm25s", "candidates": 50, "model": None}
    assert key_view("retriever", dict(compose(["retriever=dense"]).retriever)) == flat


# Cell and probe keys computed at commit 62abdde, before backends and retrievers had a
# schema each. Since local inputs are keyed by content (the GGUF by its digest, never its
# path) these are the keys the same cells had before (identify(cfg).legacy): finished
# results are still found under them (SHIMS content_keyed_inputs).
KEYS_BEFORE = [
    (["strategy=nf", "limit=5", "grid_name=demo"], "smollm2-135m__mini__nf__bm25s-k10__n5__s0__68e1147a", "smollm2-135m__mini__n4__bfae2e7a"),
    (["backend=llamacpp", "backend.n_threads=3"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__57347540", "smollm2-135m__mini__n20__15dc292a"),
    # Moved on purpose (CHANGELOG): vLLM now loads smollm2-135m from a folder made of its GGUF
    # (model.hf_source: gguf, keyed on vLLM alone), and backend=openai sends every sampling
    # field (backend.sampling: explicit), which changes what a served model samples.
    (["backend=vllm"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__939e4b4f", "smollm2-135m__mini__n20__83829857"),
    (["backend=openai"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__cfddceb6", "smollm2-135m__mini__n20__b0cbebe6"),
    (["backend=openai", "backend.n_ctx=2048"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__26527988", "smollm2-135m__mini__n20__fdcef39e"),
    (["backend=vllm", "model=qwen2.5-7b"], "qwen2.5-7b__mini__nf__bm25s-k10__nall__s0__582c0fe7", "qwen2.5-7b__mini__n20__101c7b6b"),  # a hub model on vLLM: unmoved
    (["retriever=dense"], "smollm2-135m__mini__nf__dense-k10__nall__s0__8f8386d4", "smollm2-135m__mini__n20__76870d5a"),
    (["retriever=pyserini"], "smollm2-135m__mini__nf__pyserini-k10__nall__s0__b35b0246", "smollm2-135m__mini__n20__b5c08af7"),
    (["retriever=rerank", "retriever.candidates=20"], "smollm2-135m__mini__nf__rerank-k10__nall__s0__0d0b6e65", "smollm2-135m__mini__n20__f64d9dd8"),
    # Moved on purpose (CHANGELOG): a madara cell's key now covers the Conflict Detector's
    # templates its routed treatments send (an edit of detector_*.txt reused old cells).
    (["strategy=madara"], "smollm2-135m__mini__madara__bm25s-k10__nall__s0__636590a9", "smollm2-135m__mini__n20__15dc292a"),
]

# The same cells' keys since local inputs are keyed by content (CHANGELOG: every cell of a
# model read from a GGUF moved; hub models without a GGUF did not).
KEYS_NOW = [
    (["strategy=nf", "limit=5", "grid_name=demo"], "smollm2-135m__mini__nf__bm25s-k10__n5__s0__8feab980", "smollm2-135m__mini__n4__3faa2ab5"),
    (["backend=llamacpp", "backend.n_threads=3"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__f6d90a6b", "smollm2-135m__mini__n20__bbe58420"),
    (["backend=vllm"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__a3b7a669", "smollm2-135m__mini__n20__bffbd72a"),
    (["backend=openai"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__eb690af5", "smollm2-135m__mini__n20__592004b6"),
    (["backend=openai", "backend.n_ctx=2048"], "smollm2-135m__mini__nf__bm25s-k10__nall__s0__73274da4", "smollm2-135m__mini__n20__db4c4ec0"),
    (["backend=vllm", "model=qwen2.5-7b"], "qwen2.5-7b__mini__nf__bm25s-k10__nall__s0__582c0fe7", "qwen2.5-7b__mini__n20__101c7b6b"),
    (["retriever=dense"], "smollm2-135m__mini__nf__dense-k10__nall__s0__b0c6c0e4", "smollm2-135m__mini__n20__362c368c"),
    (["retriever=pyserini"], "smollm2-135m__mini__nf__pyserini-k10__nall__s0__5c650b15", "smollm2-135m__mini__n20__5dec8e54"),
    (["retriever=rerank", "retriever.candidates=20"], "smollm2-135m__mini__nf__rerank-k10__nall__s0__91aee319", "smollm2-135m__mini__n20__c0c8e652"),
    (["strategy=madara"], "smollm2-135m__mini__madara__bm25s-k10__nall__s0__d2031f3b", "smollm2-135m__mini__n20__bbe58420"),
    # Moved on purpose (CHANGELOG, issue 46): the authors' parser read these prefix re-scores
    # as 0 each (were ...__34686732 and ...__n20__e3a48e65); logprob re-scores never were, and stay.
    (["strategy=madara", "reading.score_parser=authors", "rsc.rescore=prefix"],
     "smollm2-135m__mini__madara__bm25s-k10__nall__s0__0a046f4e", "smollm2-135m__mini__n20__b102aaf9"),
    (["strategy=madara", "reading.score_parser=authors", "rsc.rescore=prefix", "rsc.rescoring=logprob"],
     "smollm2-135m__mini__madara__bm25s-k10__nall__s0__cd8382bd", "smollm2-135m__mini__n20__92539419"),
    # Benchmarks other than mini, as keyed before the loaders became one module each and the
    # cell a plain record (ed5e59b): their benchmark node, keyed whole, did not move.
    (["benchmark=triviaqa", "strategy=pde"], "smollm2-135m__triviaqa__pde__bm25s-k10__nall__s0__40225ca7", "smollm2-135m__triviaqa__n100__70cacf19"),
    (["benchmark=musique", "strategy=three_agent", "limit=20"], "smollm2-135m__musique__three_agent__bm25s-k10__n20__s0__96e15142",
     "smollm2-135m__musique__n100__c6b283cb"),
    (["benchmark=fever", "strategy=madara"], "smollm2-135m__fever__madara__bm25s-k10__nall__s0__b3c0dacc", "smollm2-135m__fever__n100__30a96f48"),
]


def _composed(overrides):
    if "grid_name=demo" in overrides:  # the first cell of the demo grid that was (demo-full since issue 30), as it composes it
        from madara_cli.experiment.grid import expand

        return expand("demo-full")[0]
    return compose(overrides)


def _before(ident):
    """The key a cell or probe had under the path-keyed rule (itself where nothing moved)."""
    return (ident.legacy[0] if ident.legacy else getattr(ident, "cell", None) or ident.probe).key


@pytest.mark.parametrize("overrides, cell_key, probe_key", KEYS_BEFORE)
def test_the_keys_of_before_are_still_known(overrides, cell_key, probe_key):
    from madara_cli.config.identity import identify, identify_probe

    cfg = _composed(overrides)
    assert _before(identify(cfg)) == cell_key
    assert _before(identify_probe(cfg)) == probe_key


@pytest.mark.llm  # the embedded model's GGUF is read: its digest keys the cells
@pytest.mark.parametrize("overrides, cell_key, probe_key", KEYS_NOW)
def test_shipped_cell_and_probe_keys_do_not_move(overrides, cell_key, probe_key):
    from madara_cli.config.identity import identify_probe

    cfg = _composed(overrides)
    assert cell_from_cfg(cfg).key == cell_key
    assert identify_probe(cfg).key == probe_key


# One golden key per shipped strategy (its default cell on the default model, benchmark,
# backend and retriever): now, and before local inputs were keyed by content. A change
# that moves one says so in its commit and the CHANGELOG.
STRATEGY_KEYS = [
    ("atf", "05e2e68e", "c160158e"),
    ("cot", "015e77e1", "ed0e6af7"),
    ("cross_encoder", "ff11c20c", "39d542c7"),
    ("madara", "d2031f3b", "636590a9"),
    ("main_rag", "519dc279", "d85a1525"),
    ("nf", "f6d90a6b", "57347540"),
    ("pde", "d663f846", "80f3dd20"),
    ("pde_random", "46859073", "8dfea888"),
    ("pde_uniform", "58b85fd6", "f935db33"),
    ("rrf", "1ada7fad", "32f5d216"),
    ("sda", "cc7df6c8", "c34f2f7e"),
    ("sda_cot", "94105763", "6af59e06"),
    ("self_consistency", "d6c1ebd1", "4e6fb726"),
    ("three_agent", "099bdc69", "f0032379"),
]


@pytest.mark.llm  # the embedded model's GGUF is read: its digest keys the cells
@pytest.mark.parametrize("strategy, config_hash, before", STRATEGY_KEYS)
def test_each_shipped_strategy_keeps_its_key(strategy, config_hash, before):
    from madara_cli.config.identity import identify, identify_probe

    ident = identify(compose([f"strategy={strategy}"]))
    assert ident.key == f"smollm2-135m__mini__{strategy}__bm25s-k10__nall__s0__{config_hash}"
    assert identify_probe(compose([f"strategy={strategy}"])).key == "smollm2-135m__mini__n20__bbe58420"  # no strategy moves a probe


@pytest.mark.parametrize("strategy, config_hash, before", STRATEGY_KEYS)
def test_each_shipped_strategy_is_found_under_its_key_of_before(strategy, config_hash, before):
    from madara_cli.config.identity import identify

    assert _before(identify(compose([f"strategy={strategy}"]))) == f"smollm2-135m__mini__{strategy}__bm25s-k10__nall__s0__{before}"


def test_every_shipped_strategy_has_a_golden_key():
    from madara_cli.config import options

    assert sorted(s for s, *_ in STRATEGY_KEYS) == options("strategy")


# Snapshot keys (their file names) per shipped retriever, computed before the move.
SNAPSHOT_DIGESTS = {"bm25s": "f3d053ce0b7324d4", "dense": "d83f94d12af186a2", "pyserini": "9da96e77b70c250e", "rerank": "610b620a85c7e4a3"}


@pytest.mark.parametrize("retriever", sorted(SNAPSHOT_DIGESTS))
def test_each_shipped_retriever_keeps_its_snapshot_key(retriever):

    from madara_cli.config.identity import snapshot_identity, snapshot_name

    cfg = compose([f"retriever={retriever}"])
    key = snapshot_identity(cfg.benchmark.to_dict(), "src", cfg.retriever.to_dict(), {"sha256": "c"}, None)
    assert snapshot_name(key).rsplit("__", 1)[1] == SNAPSHOT_DIGESTS[retriever]


def test_every_old_key_allowance_is_in_the_one_table():
    """The identity room's shim table names each allowance with what, since when and why;
    the constants it documents are the ones keys use."""
    from madara_cli.config import keys

    assert all(s.what and s.since and s.why for s in keys.SHIMS.values())
    for name in ("omit_at_old_value", "flat_plugin_defaults", "flat_strategy_defaults", "model_chat_defaults",
                 "paper_reading", "router_default", "isolation_probe_off", "pde_random_asks_no_agent", "content_keyed_inputs"):
        assert name in keys.SHIMS
    # no other module keeps an old-key constant of its own
    import pathlib

    pkg = pathlib.Path(keys.__file__).parents[1]
    for path in pkg.rglob("*.py"):
        if path.name == "keys.py":
            continue
        text = path.read_text(encoding="utf-8")
        for const in ("KEY_OMITS_AT =", "FLAT_KEY_DEFAULTS =", "FLAT_STRATEGY_DEFAULTS: dict[", "MODEL_CHAT_DEFAULTS ="):
            assert const not in text, f"{path} defines {const}"


# --------------------------------------------------------------------------- #
# A backend from tests/ only: one module plus one yaml
# --------------------------------------------------------------------------- #


def _only_cell(results: Path) -> Path:
    cells = [p for p in results.glob("*/*") if (p / "metrics.json").is_file()]
    assert len(cells) == 1, cells
    return cells[0]


def test_a_backend_from_tests_runs_a_cell_and_plan_fingerprints_it(monkeypatch, capsys, toy_configs, tmp_path):
    results = tmp_path / "results"
    code, _, err = cli("--config-dir", str(toy_configs), "--include", str(PLUGINS),
                          "run", "backend=toy", "strategy=nf", "benchmark=mini", "limit=2", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    cell = _only_cell(results)
    rows = [json.loads(line) for line in (cell / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["raw"] for r in rows} == {"Varnholt"}
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["provenance"]["engine"]["backend"] == "toy"

    # Its runtime-only setting stays out of the key, its reply is in it.

    monkeypatch.setenv("MADARA_CONFIG_DIR", str(toy_configs))
    base = ["backend=toy", "strategy=nf", "benchmark=mini", "limit=2", f"results_dir={results}"]
    assert cell_from_cfg(compose([*base, "backend.pause_s=2.5"])).key == cell.name
    assert cell_from_cfg(compose([*base, "backend.reply=Other"])).key != cell.name
    code, _, err = cli("--config-dir", str(toy_configs), "--include", str(PLUGINS),
                          "run", *base, "backend.n_threads=2", monkeypatch=monkeypatch, capsys=capsys)
    assert "backend.n_threads does not apply to backend toy; its settings: name, batch_size, reply, pause_s" in one_line(code, err)

    # plan computes the toy's fingerprint from its record, without building it: every
    # call the run made is found in the real response cache.
    from madara_cli.experiment.grid import expand
    from madara_cli.experiment.plan import plan_grid

    built = sys.modules[next(m for m in sys.modules if m.endswith("_toy_backend"))].BUILT
    n_built = len(built)
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(toy_configs))
    total = plan_grid("toygrid", expand("toygrid", [f"results_dir={results}"])).total()
    assert total.calls == 2 and total.cached == 2
    assert len(built) == n_built  # no engine was built for the plan


# --------------------------------------------------------------------------- #
# Strategies as plugins: impl apart from the label
# --------------------------------------------------------------------------- #

TOY_STRATEGY = '''
    from dataclasses import dataclass

    from madara_cli.config.schema import StrategyConfig
    from madara_cli.plugins import register
    from madara_cli.strategies.context import StrategySpec, generate_answers


    @dataclass
    class FirstDocsConfig(StrategyConfig):
        n_docs: int = 3  # the first n retrieved documents go to the generator


    def first_docs(ctx, examples):
        n = int(ctx.strategy.n_docs)
        return generate_answers(ctx, "generate", examples, [ex.docs[:n] for ex in examples])


    SPEC = register(StrategySpec(name="first_docs", schema=FirstDocsConfig, run=first_docs))
'''


PREPARED_STRATEGY = '''
    from madara_cli.config.schema import StrategyConfig
    from madara_cli.plugins import register
    from madara_cli.strategies.context import StrategySpec, generate_answers

    SEEN = []


    def first_doc_only(cfg, engines, calibration, reranker):
        SEEN.append((cfg.strategy.name, calibration is not None))

        def run(ctx, examples):
            return generate_answers(ctx, "generate", examples, [ex.docs[:1] for ex in examples])

        return run


    SPEC = register(StrategySpec(name="prepared_first", schema=StrategyConfig, prepare=first_doc_only))
'''


def test_a_strategy_with_a_prepare_step_runs_what_the_step_returns(monkeypatch, capsys, toy_configs, tmp_path):
    """A spec without a run function, whose prepare step (run before the engine is taken)
    returns what the cell runs."""
    import sys

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "prepared_first.py").write_text(textwrap.dedent(PREPARED_STRATEGY))
    (toy_configs / "strategy").mkdir()
    (toy_configs / "strategy" / "prepared_first.yaml").write_text("name: prepared_first\n")
    results = tmp_path / "results"
    code, _, err = cli("--config-dir", str(toy_configs), "--include", str(PLUGINS), "--include", str(mine),
                          "run", "backend=toy", "strategy=prepared_first", "limit=2", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in (_only_cell(results) / "predictions.jsonl").read_text().splitlines()]
    assert [len(r["doc_ids"]) for r in rows] == [1, 1]
    (module,) = [m for name, m in sys.modules.items() if name.endswith("_prepared_first")]
    assert module.SEEN == [("prepared_first", True)]


def test_madara_is_a_routed_strategy_spec():
    """Its spec says what it is (routed: the probe's route runs the cell), and no table
    filled from a higher floor stands between it and the pipeline."""
    from madara_cli.composition import ensure_loaded
    from madara_cli.plugins.catalog import CATALOG
    from madara_cli.strategies import strategy_fn

    ensure_loaded()
    spec = CATALOG.get("strategy", "madara")
    assert spec.run is None and spec.prepare is None and spec.routed and set(spec.key_groups) == {"rsc", "router"}
    assert spec.families() == ("assessors", "detector", "rescore")
    with pytest.raises(ConfigError, match="route"):
        strategy_fn("madara")


def test_a_strategy_outside_the_package_runs_under_its_own_label(monkeypatch, capsys, toy_configs, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "first_docs.py").write_text(textwrap.dedent(TOY_STRATEGY))
    (toy_configs / "strategy").mkdir()
    (toy_configs / "strategy" / "first_two.yaml").write_text("impl: first_docs\nname: first_two\nn_docs: 2\n")
    results = tmp_path / "results"
    code, _, err = cli("--config-dir", str(toy_configs), "--include", str(PLUGINS), "--include", str(mine),
                          "run", "backend=toy", "strategy=first_two", "limit=2", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    cell = _only_cell(results)
    assert "__first_two__" in cell.name
    rows = [json.loads(line) for line in (cell / "predictions.jsonl").read_text().splitlines()]
    assert [len(r["doc_ids"]) for r in rows] == [2, 2]
    with (results / "summary.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["strategy"] == "first_two" and row["key"] == cell.name
    assert row["strategy.n_docs"] == "2" and row["strategy.impl"] == "first_docs"

    # Its schema is checked at compose like a shipped strategy's.
    code, _, err = cli("--config-dir", str(toy_configs), "--include", str(PLUGINS), "--include", str(mine),
                          "run", "backend=toy", "strategy=first_two", "strategy.top_k=3", "limit=2", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    assert "strategy.top_k does not apply to strategy first_two; its settings: name, n_docs" in one_line(code, err)


def test_an_unknown_implementation_stops_at_compose(monkeypatch, capsys, tmp_path):
    d = tmp_path / "configs" / "strategy"
    d.mkdir(parents=True)
    (d / "pde_top3.yaml").write_text("name: pde_top3\ntop_k: 3\n")
    code, _, err = cli("--config-dir", str(d.parent), "run", "strategy=pde_top3", "limit=1", f"results_dir={tmp_path}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line(code, err)
    assert "unknown strategy 'pde_top3'; valid: " in line and "pde, pde_random" in line


def test_impl_names_the_code_and_is_elided_where_it_is_the_label(monkeypatch, tmp_path):

    d = tmp_path / "configs" / "strategy"
    d.mkdir(parents=True)
    (d / "pde_top3.yaml").write_text("impl: pde\nname: pde_top3\ntop_k: 3\n")
    (d / "pde_again.yaml").write_text("impl: pde\nname: pde\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(d.parent))
    top3 = compose(["strategy=pde_top3"])
    assert top3.strategy.impl == "pde" and top3.strategy.top_k == 3 and top3.strategy.vote == "score"
    assert "__pde_top3__" in cell_from_cfg(top3).key
    shipped = cell_from_cfg(compose(["strategy=pde"])).key
    assert cell_from_cfg(compose(["strategy=pde_again"])).key == shipped
    assert cell_from_cfg(compose(["strategy=pde", "strategy.top_k=3"])).config_hash != cell_from_cfg(top3).config_hash  # impl is in the key


# --------------------------------------------------------------------------- #
# Entry points of installed packages
# --------------------------------------------------------------------------- #

EP_MODULE = '''
    from dataclasses import dataclass

    from madara_cli.config.schema import StrategyConfig
    from madara_cli.plugins import register
    from madara_cli.strategies.context import StrategySpec, generate_answers


    @dataclass
    class LastDocConfig(StrategyConfig):
        depth: int = 1


    def last_doc(ctx, examples):
        return generate_answers(ctx, "generate", examples, [ex.docs[-int(ctx.strategy.depth):] for ex in examples])


    register(StrategySpec(name="ep_last_doc", schema=LastDocConfig, run=last_doc))


    from madara_cli.backends.base import BackendSpec
    from madara_cli.config.schema import BackendConfig


    @dataclass
    class EchoConfig(BackendConfig):
        word: str = "yes"


    # Not registered here: the entry point names the record, and the loader registers it.
    SPEC = BackendSpec(name="ep_echo", schema=EchoConfig, build=lambda cfg: None, fingerprint=lambda cfg: f"echo:{cfg.backend.word}",
                       runtime_only=("batch_size",), package="madara-epdemo")
'''


def test_entry_points_register_strategies_and_backends(monkeypatch, tmp_path):
    from madara_cli.composition.plugins import load_entry_points
    from madara_cli.config.plugin_schemas import schema_for
    from madara_cli.plugins.catalog import CATALOG

    site = tmp_path / "site"
    info = site / "madara_epdemo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: madara-epdemo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[madara.strategies]\nlast_doc = madara_epdemo_mod\n\n[madara.backends]\nep_echo = madara_epdemo_mod:SPEC\n")
    (site / "madara_epdemo_mod.py").write_text(textwrap.dedent(EP_MODULE))
    monkeypatch.syspath_prepend(str(site))
    load_entry_points()
    assert CATALOG.find("strategy", "ep_last_doc") is not None and schema_for("strategy", "ep_last_doc").__name__ == "LastDocConfig"

    d = tmp_path / "configs" / "strategy"
    d.mkdir(parents=True)
    (d / "last.yaml").write_text("impl: ep_last_doc\nname: last\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(d.parent))
    assert compose(["strategy=last", "strategy.depth=2"]).strategy.depth == 2
    with pytest.raises(ConfigError, match="unknown key 'strategy.bogus'; valid strategy keys: name, depth"):
        compose(["strategy=last", "strategy.bogus=1"])

    from madara_cli.backends import backend_fingerprint, engine_package

    (d.parent / "backend").mkdir()
    (d.parent / "backend" / "echo.yaml").write_text("name: ep_echo\nword: hello\n")
    echo = compose(["backend=echo"])
    assert backend_fingerprint(echo) == "echo:hello" and engine_package("ep_echo") == "madara-epdemo"
    with pytest.raises(ConfigError, match="backend.n_threads does not apply to backend echo; its settings: name, batch_size, word"):
        compose(["backend=echo", "backend.n_threads=2"])


def test_a_broken_include_is_one_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "bad.py").write_text("import not_a_module_anywhere\n")
    code, _, err = cli("--include", str(tmp_path), "ls", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line(code, err)
    assert "bad.py" in line and "ModuleNotFoundError" in line
    code, _, err = cli("--include", str(tmp_path / "nope"), "ls", monkeypatch=monkeypatch, capsys=capsys)
    assert "--include" in one_line(code, err)


@pytest.mark.parametrize(
    "body,code,needle",
    [
        ("import sys\nsys.exit(0)\n", 2, "called sys.exit(0) while importing"),
        ("import sys\nsys.exit(3)\n", 2, "called sys.exit(3) while importing"),
        ("raise SystemExit('bye')\n", 2, "called sys.exit('bye')"),
        ("raise KeyboardInterrupt\n", 130, "interrupted while importing"),
        ("raise RecursionError('deep')\n", 2, "RecursionError: deep"),
    ],
)
def test_an_include_that_exits_or_is_interrupted_is_one_line_and_runs_nothing(monkeypatch, capsys, tmp_path, body, code, needle):
    """sys.exit(0) at import used to end `madara run` with exit 0 having run nothing."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "quits.py").write_text(body)
    results = tmp_path / "results"
    rc, _, err = cli("--include", str(plugins), "run", "strategy=nf", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code and len(lines) == 1 and "Traceback" not in err, err
    assert "--include" in lines[0] and "quits.py" in lines[0] and needle in lines[0], lines[0]
    assert not results.exists()


def test_an_entry_point_that_exits_at_import_is_one_line(monkeypatch, capsys, tmp_path):
    site = tmp_path / "site"
    info = site / "madara_quits-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: madara-quits\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[madara.strategies]\nquits = madara_quits_mod\n")
    (site / "madara_quits_mod.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(site))
    code, _, err = cli("run", "strategy=nf", "limit=1", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line(code, err)
    assert "plugin quits (entry point madara.strategies: madara_quits_mod)" in line and "sys.exit(0)" in line
    assert not (tmp_path / "r").exists()


def test_a_config_yaml_of_before_gives_the_summary_columns_of_before():
    """Cells finished before the per-backend schemas hold a flat backend node in their
    config.yaml; summary.csv (written by madara tables) reads its columns from it."""
    from madara_cli.config.keys import flat_settings
    from madara_cli.config.settings import as_settings

    cfg = compose(["strategy=nf", "limit=2"]).to_dict()
    cfg["backend"] = {"name": "llamacpp", "batch_size": 16, "n_threads": None, "n_ctx": None, "tensor_parallel_size": 1,
                      "gpu_memory_utilization": 0.9, "enable_prefix_caching": True, "base_url": "http://127.0.0.1:8000/v1",
                      "served_model_name": None, "tokenizer": None, "api_key_env": "OPENAI_API_KEY", "max_in_flight": 8,
                      "retries": 4, "timeout_s": 120.0}
    columns = [k for k in flat_settings(as_settings(cfg)) if k.startswith("backend.")]
    assert columns == ["backend.name", "backend.n_ctx", "backend.served_model_name", "backend.tokenizer"]


def test_a_label_over_a_named_schema_runs_that_implementation(monkeypatch, tmp_path):
    """A yaml listing ``pde_schema`` under another name (the old way to vary PDE) runs
    pde, as its key says, instead of failing at run time on an unknown strategy."""
    from madara_cli.config.keys import strategy_impl

    d = tmp_path / "configs" / "strategy"
    d.mkdir(parents=True)
    (d / "pde_top3.yaml").write_text("defaults:\n  - pde_schema\n  - _self_\nname: pde_top3\ntop_k: 3\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(d.parent))
    node = compose(["strategy=pde_top3"]).strategy
    assert strategy_impl(node) == "pde" and node.impl == "pde" and node.top_k == 3
    assert "impl" not in compose(["strategy=pde"]).strategy


def test_each_shipped_strategy_yaml_names_the_module_of_its_spec():
    import re

    from madara_cli.composition import ensure_loaded
    from madara_cli.config import options
    from madara_cli.plugins.catalog import CATALOG

    ensure_loaded()
    for name in options("strategy"):
        text = (ROOT / "configs" / "strategy" / f"{name}.yaml").read_text()
        (module,) = re.findall(r"its spec \(schema, ranges, checks, prompt families\): (madara_cli/strategies/\w+)\.py", text)
        assert CATALOG.owner("strategy", name) == module.replace("/", "."), name


def test_one_registration_shape_for_every_kind():
    """Every shipped plug-in is a Spec in the one catalog, registered by the module that
    implements it; no kind keeps a registry of its own."""
    import pathlib

    from madara_cli.composition import ensure_loaded
    from madara_cli.plugins.catalog import CATALOG, KINDS
    from madara_cli.plugins.shape import Spec

    ensure_loaded()
    for kind in KINDS:
        assert CATALOG.names(kind), kind
        for spec in CATALOG.specs(kind).values():
            assert isinstance(spec, Spec) and type(spec).kind == kind
    pkg = ROOT / "madara_cli"
    for path in pkg.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "Registry(" not in text and ".register(\"" not in text, f"{path.relative_to(ROOT)} keeps a registry of its own"
    assert not (pkg / "registry.py").exists() and pathlib.Path(pkg / "plugins" / "catalog.py").is_file()


# One golden key per shipped benchmark (its loader and config), on a hub model served by
# vLLM: no local input, so unmoved by content keying (computed when it came in).
BENCHMARK_KEYS = [
    ("arc_challenge", "568573fd"), ("asqa", "47e2f840"), ("conflictqa", "c1442067"), ("conflictqa-strategyqa", "483a386e"),
    ("conflicts", "c4bb5c52"), ("fever", "26edcc5f"), ("jsonl", "7b114103"), ("mini", "582c0fe7"), ("musique", "5aa886a9"),
    ("popqa", "1b7d2eee"), ("triviaqa", "b603a36d"),
]


@pytest.mark.parametrize("benchmark, config_hash", BENCHMARK_KEYS)
def test_each_shipped_benchmark_keeps_its_key(benchmark, config_hash):
    from madara_cli.config.identity import identify

    ident = identify(compose([f"benchmark={benchmark}", "model=qwen2.5-7b", "backend=vllm"]))
    assert ident.key == f"qwen2.5-7b__{benchmark}__nf__bm25s-k10__nall__s0__{config_hash}" and not ident.legacy


def test_every_shipped_benchmark_has_a_golden_key():
    from madara_cli.config import options

    assert sorted(b for b, _ in BENCHMARK_KEYS) == options("benchmark")


@pytest.mark.parametrize("kind, rel, text, overrides", [
    ("backend", "backend/mine.yaml", "name: nosuch\n", ["backend=mine"]),
    ("retriever", "retriever/mine.yaml", "name: nosuch\nk: 2\n", ["retriever=mine"]),
    ("strategy", "strategy/mine.yaml", "name: mine\nimpl: nosuch\n", ["strategy=mine"]),
    ("loader", None, None, ["benchmark.loader=nosuch"]),
])
def test_an_unknown_name_of_every_kind_is_the_same_one_line(tmp_path, monkeypatch, capsys, kind, rel, text, overrides):
    """One registry, one lookup, one error: whatever the kind, an unknown implementation
    is the catalog's line, before anything loads."""
    from madara_cli.plugins.catalog import CATALOG

    args = ["run", *overrides, "--cfg", "job"]
    if rel is not None:
        (tmp_path / "c" / rel).parent.mkdir(parents=True)
        (tmp_path / "c" / rel).write_text(text)
        args = ["--config-dir", str(tmp_path / "c"), *args]
    code, out, err = cli(*args, monkeypatch=monkeypatch, capsys=capsys)
    line = one_line(code, err)
    valid = ", ".join(CATALOG.names(kind))
    assert line == (f"error: unknown {kind} 'nosuch'; valid: {valid} (one of your own registers from an --include file or a "
                    f"'madara.{kind}s' entry point)")
    with pytest.raises(ConfigError) as e:
        CATALOG.get(kind, "nosuch")
    assert f"error: {e.value}" == line
