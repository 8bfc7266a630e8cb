"""Your own data: the generic ``benchmark=jsonl`` format, and loaders that come from
an installed package's ``madara.loaders`` entry point."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.core.errors import ConfigError, DataError
from madara_cli.core.records import Doc
from madara_cli.data.splits import load_all_examples
from tests.fakes import cli, fresh_catalog

ROWS = [
    {"id": "q1", "question": " Who wrote Hamlet? ", "answers": ["William Shakespeare", "Shakespeare"],
     "documents": [{"title": "Hamlet", "text": "Hamlet is a  tragedy by William Shakespeare."}, "Macbeth is also his."]},
    {"question": "What is the capital of France?", "answers": "Paris", "documents": ["Paris is the capital of France."]},
    {"id": 7, "question": "Which river flows through Cairo?", "answers": ["Nile"]},
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def jsonl_cfg(path: Path, *more: str):
    return compose(["benchmark=jsonl", f"benchmark.path={path}", *more]).benchmark


def test_jsonl_rows_become_examples(tmp_path):
    """Both answer shapes, both document shapes, given and missing ids, a row without
    documents (left to the corpus), in file order."""
    f = write_jsonl(tmp_path / "mine.jsonl", [ROWS[0], "", ROWS[1], ROWS[2]])
    q1, q2, q3 = load_all_examples(jsonl_cfg(f))
    assert (q1.id, q1.question, q1.answers, q1.task) == ("q1", "Who wrote Hamlet?", ("William Shakespeare", "Shakespeare"), "factoid")
    assert q1.docs == (Doc("q1-d00", "Hamlet is a tragedy by William Shakespeare.", "Hamlet"), Doc("q1-d01", "Macbeth is also his.", ""))
    assert (q2.id, q2.answers, [d.id for d in q2.docs]) == ("jsonl-00001", ("Paris",), ["jsonl-00001-d00"])
    assert (q3.id, q3.answers, q3.docs) == ("7", ("Nile",), None)
    renamed = load_all_examples(jsonl_cfg(f, "benchmark.name=capitals"))
    assert renamed[1].id == "capitals-00001"


@pytest.mark.parametrize(
    "line, says",
    [
        ('{"question": "q?", "answers": ["a"]', "not valid JSON"),
        ('["q?", "a"]', "must be a JSON object"),
        ('{"answers": ["a"]}', "no 'question' field"),
        ('{"question": "q?"}', "no 'answers' field"),
        ('{"question": 3, "answers": ["a"]}', "'question' must be a string, not a number"),
        ('{"question": "q?", "answers": [1969]}', "'answers' must be a string or a list of strings"),
        ('{"question": "q?", "answers": "a", "documents": "one text"}', "'documents' must be a list"),
        ('{"question": "q?", "answers": "a", "documents": [{"title": "t"}]}', "document 0 needs a 'text' string"),
        ('{"question": "q?", "answers": "a", "documents": [["t", "x"]]}', "document 0 must be a string or"),
        ('{"question": "q?", "answers": "a", "id": {"n": 1}}', "'id' must be a non-empty string or an integer"),
    ],
)
def test_a_bad_row_is_named_by_file_and_line(tmp_path, line, says):
    f = write_jsonl(tmp_path / "bad.jsonl", [ROWS[1], line])
    with pytest.raises(DataError) as e:
        load_all_examples(jsonl_cfg(f))
    msg = str(e.value)
    assert msg.startswith(f"{f}:2: ") and says in msg and "\n" not in msg


def test_rows_without_answers_are_dropped_as_for_every_benchmark(tmp_path, capsys):
    f = write_jsonl(tmp_path / "mine.jsonl", [ROWS[1], {"question": "Unknown?", "answers": []}])
    assert [ex.id for ex in load_all_examples(jsonl_cfg(f))] == ["jsonl-00000"]
    assert "dropped 1 of 2 rows: 1 with no gold answer (jsonl-00001)" in capsys.readouterr().err
    assert len(load_all_examples(jsonl_cfg(f, "benchmark.require_answers=false"))) == 2


def test_jsonl_without_a_path_says_to_set_one(tmp_path):
    with pytest.raises(DataError, match=r"set benchmark\.path=FILE"):
        load_all_examples(compose(["benchmark=jsonl"]).benchmark)
    r = cli("run", "benchmark=jsonl", "strategy=nf", "limit=1", f"results_dir={tmp_path}", timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "set benchmark.path=FILE" in lines[0], r.stderr


def test_rows_without_documents_retrieve_from_the_corpus(tmp_path):
    """No ``documents``: the row's documents are the corpus's best matches (bm25s)."""
    from madara_cli.experiment.examples import load_cell, retrieve_for

    f = write_jsonl(tmp_path / "mine.jsonl", [ROWS[2]])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "c1", "title": "Nile", "text": "The Nile flows through Cairo, the capital of Egypt."},
        {"id": "c2", "title": "Seine", "text": "The Seine flows through Paris."},
        {"id": "c3", "title": "Danube", "text": "The Danube flows through Vienna and Budapest."},
    ])
    cfg = compose(["benchmark=jsonl", f"benchmark.path={f}", f"benchmark.corpus={corpus}", "retriever.k=2", f"results_dir={tmp_path / 'results'}"])
    (ex,) = retrieve_for(cfg, load_cell(cfg).examples, None)
    assert len(ex.docs) == 2 and ex.docs[0].id == "c1"  # the one that names Cairo first


# ---------------------------------------------------------------------------
# Loaders from an installed package's entry point (madara.loaders)


@pytest.fixture
def fresh_registry(monkeypatch):
    """Loaders and entry points registered by a test stay inside it (the next compose
    loads the plug-ins afresh, as each CLI invocation does)."""
    yield from fresh_catalog(monkeypatch)


def install_fake(site: Path, dist: str, entry: str, module: str, source: str) -> None:
    """What ``pip install`` leaves for a package with one ``madara.loaders`` entry point:
    its module and a ``<dist>-0.1.dist-info`` with METADATA and entry_points.txt."""
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[madara.loaders]\n{entry}\n", encoding="utf-8")


TOY_LOADER = '''
from dataclasses import dataclass

from madara_cli.config.schema import BenchmarkConfig
from madara_cli.data.loaders import LoaderSpec
from madara_cli.plugins import register
from madara_cli.core.records import Doc, Example


@dataclass
class ToyBenchmark(BenchmarkConfig):  # the setting this loader alone reads
    n_questions: int = 5


def load_toy(cfg):
    return [Example(id=f"toy-{i}", question=f"What is toy {i}?", answers=(f"answer {i}",),
                    docs=(Doc(id=f"toy-{i}-d0", text=f"Toy {i} is answer {i}."),)) for i in range(cfg.n_questions)]


register(LoaderSpec(name="toy", load=load_toy, schema=ToyBenchmark))
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
    source = TOY_LOADER.replace('register(LoaderSpec(name="toy", load=load_toy, schema=ToyBenchmark))\n', "").replace("load_toy", "load_toy2")
    install_fake(site, "toy_callable", "toy2 = toy_callable_mod:register_toy", "toy_callable_mod",
                 source + '\n\ndef register_toy():\n    register(LoaderSpec(name="toy2", load=load_toy2, schema=ToyBenchmark))\n')
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "toy_callable_mod", raising=False)
    assert [ex.id for ex in load_all_examples(compose(["benchmark=mini", "benchmark.loader=toy2", "benchmark.n_questions=2"]).benchmark)] == ["toy-0", "toy-1"]


def test_a_loaders_ranges_are_checked_on_the_benchmark_node(fresh_registry):
    """A loader's ``ranges`` name settings of the node it reads (``benchmark``); mini's own: n_questions."""
    from madara_cli.config.schema import BenchmarkConfig
    from madara_cli.data.loaders import LoaderSpec
    from madara_cli.plugins import register
    from madara_cli.plugins.shape import int_range

    compose([])  # the shipped loaders first, so the one below joins them
    register(LoaderSpec(name="ranged", load=print, schema=BenchmarkConfig, ranges={"calibration": int_range(5)}))
    with pytest.raises(ConfigError, match=r"^benchmark.calibration=2 is out of range: expected an integer >= 5$"):
        compose(["benchmark=fever", "benchmark.loader=ranged", "benchmark.calibration=2"])
    with pytest.raises(ConfigError, match=r"^benchmark.n_questions=0 is out of range: expected an integer >= 1$"):
        compose(["benchmark=mini", "benchmark.n_questions=0"])
    assert compose(["benchmark=fever", "benchmark.loader=ranged", "benchmark.calibration=5"]).benchmark.calibration == 5


def test_a_loaders_settings_are_its_own(tmp_path, monkeypatch):
    """mini's n_questions sits in mini's schema: another loader's node has no such setting, and
    setting it there (command line or yaml) is one line; the keys stay where they were."""
    from madara_cli.config.identity import snapshot_name
    from madara_cli.retrievers.retrieval import snapshot_key

    assert compose(["benchmark=mini", "benchmark.n_questions=7"]).benchmark.n_questions == 7
    assert "n_questions" not in compose(["benchmark=fever"]).benchmark.keys()
    with pytest.raises(ConfigError, match=r"^benchmark.n_questions does not apply to benchmark fever; its settings: name, task, loader"):
        compose(["benchmark=fever", "benchmark.n_questions=3"])
    with pytest.raises(ConfigError, match=r"^benchmark.n_questions does not apply to benchmark mini \(loader fever\)"):
        compose(["benchmark=mini", "benchmark.loader=fever"])
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "mine.yaml").write_text("name: mine\ntask: factoid\nloader: triviaqa\nn_questions: 3\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"^benchmark.n_questions does not apply to benchmark mine \(loader triviaqa\)"):
        compose(["benchmark=mine"])
    # flat_plugin_defaults: a node without n_questions keys as every node did when all held 60
    assert snapshot_name(snapshot_key(compose(["benchmark=fever"]))) == "fever__bm25s-k10__bacfe17b174459f7"
    assert snapshot_name(snapshot_key(compose(["benchmark=mini"]))) == "mini__bm25s-k10__92d707c94ce2ceeb"


@pytest.mark.parametrize(
    "entry, module, source, says",
    [
        ("gone = not_installed_anywhere", "unrelated_mod", "", "ModuleNotFoundError: No module named 'not_installed_anywhere'"),
        ("broken = broken_mod", "broken_mod", "raise RuntimeError('the plug-in\\nis broken')\n", "RuntimeError: the plug-in is broken"),
        ("taken = taken_mod", "taken_mod",
         "from madara_cli.data.loaders import LoaderSpec\nfrom madara_cli.plugins import register\nregister(LoaderSpec(name='musique', load=print))\n",
         "ValueError: loader 'musique' is already registered (by madara_cli.data.loaders.musique_loader)"),
    ],
)
def test_a_broken_or_missing_plugin_is_one_line_naming_its_entry_point(tmp_path, monkeypatch, fresh_registry, entry, module, source, says):
    site = tmp_path / "site"
    site.mkdir()
    install_fake(site, f"dist_{module}", entry, module, source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ConfigError) as e:  # the one loader's one style, for every kind of plug-in
        compose(["benchmark=mini"])
    msg = str(e.value)
    name, _, value = entry.partition(" = ")
    assert msg.startswith(f"plugin {name} (entry point madara.loaders: {value}): ")
    assert says in msg and "\n" not in msg


def test_an_unknown_loader_lists_the_known_ones_at_compose_time():
    with pytest.raises(ConfigError) as e:
        compose(["benchmark=mini", "benchmark.loader=nosuch"])  # before any data or model loads
    msg = str(e.value)
    assert msg.startswith("unknown loader 'nosuch'; valid: ") and "jsonl" in msg and "musique" in msg and "--include" in msg


# ---------------------------------------------------------------------------
# The real model: NF and PDE on a 5-row file with inline documents


@pytest.mark.llm
def test_nf_and_pde_run_on_a_five_row_file(tmp_path):
    rows = [
        {"question": f"What colour is the {thing}?", "answers": [colour],
         "documents": [f"The {thing} is {colour}.", {"title": "Other", "text": f"Many people like the {thing}."}]}
        for thing, colour in [("sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"), ("blood", "red")]
    ]
    f = write_jsonl(tmp_path / "colours.jsonl", rows)
    results = tmp_path / "results"
    # PDE scores through next-token log-probabilities (one forward pass per score, not
    # a JSON reply): the same stages, small enough for a shared 2-core machine.
    for strategy in ("strategy=nf", "strategy=pde strategy.scoring=logprob"):
        r = cli("run", "model=smollm2-135m", "benchmark=jsonl", f"benchmark.path={f}",
                *strategy.split(), "limit=5", f"results_dir={results}", timeout=1500)
        assert r.returncode == 0, r.stderr
    cells = {p.name.split("__")[2]: p for p in results.glob("*/*") if (p / "metrics.json").is_file()}
    assert set(cells) == {"nf", "pde"}
    for cell in cells.values():
        assert cell.name.startswith("smollm2-135m__jsonl__")
        m = json.loads((cell / "metrics.json").read_text())
        assert m["n"] == 5
        preds = [json.loads(x) for x in (cell / "predictions.jsonl").read_text().splitlines()]
        assert len(preds) == 5 and all(p["doc_ids"] and all(d.startswith("jsonl-0000") for d in p["doc_ids"]) for p in preds)
