"""Boundaries a hostile environment tries: names that climb out of the results folder,
snapshots edited after retrieval, files that are not UTF-8, YAML that is broken or
tagged, a full disk, an unwritable HOME or cache folder, and runs that fail before
their first cell. Each ends in one line (or a refusal) and leaves nothing behind.

Like tests/e2e/test_bad_input.py, CLI cases go through the real entry point in process;
cases that need an engine use the deterministic fake engine (``tests.fakes.FakeBackend``).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest

from madara_cli.backends.cache import ResponseCache, _cache_error
from madara_cli.composition import compose
from madara_cli.core.errors import CacheError, ConfigError, DataError
from madara_cli.core.records import Completion
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend, cli, one_line_error

# Every case here is reported before a model could load (or runs the fake engine).
pytestmark = pytest.mark.usefixtures("no_engine")


def tree(root: Path) -> list[str]:
    """Every path under ``root`` (folders too), to see what a command left behind."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def fake_pool() -> EnginePool:
    return EnginePool(factory=lambda cfg: FakeBackend())


# --------------------------------------------------------------------------- #
# Every write inside the results folder


ESCAPES = ["../../x", "../x", "/tmp/x", "a/../../x", ".hidden", "..", "a\\b", ""]


@pytest.mark.parametrize(
    "key", ["grid_name", "model.name", "benchmark.name", "strategy.name", "retriever.name"],
)
@pytest.mark.parametrize("value", ESCAPES)
def test_every_naming_setting_refuses_a_path(monkeypatch, capsys, tmp_path, key, value):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, _, err = cli("run", "strategy=nf", "limit=1", f"{key}={value}", f"results_dir={work / 'results'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, key, "cannot name a results folder")
    assert tree(tmp_path) == ["work"]  # nothing written, inside or out


@pytest.mark.parametrize("key", ["grid_name", "model.name", "benchmark.name", "strategy.name", "retriever.name", "logger.experiment"])
@pytest.mark.parametrize("value", ["it's", "a b", "caf\u00e9", "a;b", "x" * 49])
def test_one_naming_rule_for_every_name(monkeypatch, capsys, tmp_path, key, value):
    """Letters, digits, '-', '_' and '.', at most NAME_MAX_BYTES: a quote (that broke
    MLflow's filter), a space, a non-ASCII letter or a long name stop at compose time."""
    code, _, err = cli("run", "strategy=nf", "limit=1", f'{key}="{value}"', f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, key, "cannot name a results folder", "letters, digits")
    assert not (tmp_path / "r").exists()


def test_grid_and_prompt_set_names_follow_the_same_rule(monkeypatch, capsys, tmp_path):
    code, _, err = cli("run", "--grid", "it's", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "--grid", "cannot name a results folder")
    long_set = tmp_path / "configs" / "prompts" / ("p" * 49)
    long_set.mkdir(parents=True)
    (long_set / "set.yaml").write_text("extends: madara\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    code, _, err = cli("--config-dir", str(tmp_path / "configs"), "run", "prompts=" + "p" * 49,
                               f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "prompts", "over 48")
    assert not (tmp_path / "r").exists()


def test_the_name_bound_keeps_the_longest_file_name_under_255_bytes(tmp_path):
    """The longest name madara writes is a cell being written, .tmp-<key>-<pid>: with every
    name at the bound and every count at its maximum it still fits, and it is created."""
    from madara_cli.config.identity import Cell
    from madara_cli.config.validate import MAX_K, MAX_LIMIT, MAX_SEED
    from madara_cli.core.paths import NAME_MAX_BYTES
    from madara_cli.experiment.grid import cell_from_cfg

    n = "x" * NAME_MAX_BYTES
    cfg = compose(["strategy=nf", f"grid_name={n}", f"model.name={n}", f"benchmark.name={n}", f"strategy.name={n}",
                   f"retriever.k={MAX_K}", f"seed={MAX_SEED}", f"limit={MAX_LIMIT}", f"results_dir={tmp_path}"])
    cell = cell_from_cfg(cfg)
    assert cell.model == cell.benchmark == cell.strategy == n  # names at the bound are accepted
    cell = Cell(**{**{k: getattr(cell, k) for k in ("grid", "model", "benchmark", "strategy", "k", "seed", "limit", "config_hash")}, "retriever": n})
    longest = f".tmp-{cell.key}-{2**22}"
    assert 250 <= len(longest.encode()) <= 255
    (tmp_path / longest).mkdir()  # the file system takes it


def test_must_show_grid_name_traversal_writes_nothing_outside(monkeypatch, capsys, tmp_path):
    """The issue's case, with the default results folder (./results)."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    code, _, err = cli("run", "strategy=nf", "limit=1", "grid_name=../../x", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "grid_name='../../x'")
    assert tree(tmp_path) == ["a", "a/b"]


def test_a_sweep_and_a_grid_refuse_it_too(monkeypatch, capsys, tmp_path):
    code, _, err = cli("run", "-m", "strategy=nf,pde", "limit=1", "grid_name=../x", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "grid_name")
    code, _, err = cli("run", "--grid", "../x", f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "--grid")
    assert tree(tmp_path) == []


def test_config_dir_names_cannot_climb_out(monkeypatch, capsys, tmp_path):
    """A --config-dir grid or model whose ``name:`` is a path is refused by name."""
    user = tmp_path / "mine"
    (user / "grid").mkdir(parents=True)
    (user / "model").mkdir()
    (user / "grid" / "esc.yaml").write_text("name: ../../esc\naxes:\n  strategy: [nf]\n")
    shipped = Path(compose([]).model.name)
    model = (Path(__file__).resolve().parents[2] / "configs" / "model" / f"{shipped}.yaml").read_text()
    (user / "model" / "evil.yaml").write_text(model.replace(f"name: {shipped}", "name: ../../evil"))
    results = tmp_path / "results"
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")  # recorded, so the --config-dir the run adds is undone
    code, _, err = cli("--config-dir", str(user), "run", "--grid", "esc", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "esc.yaml", "cannot name a results folder")
    code, _, err = cli("--config-dir", str(user), "run", "model=evil", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "model.name='../../evil'")
    code, _, err = cli("--config-dir", str(user), "probe", "--model", "evil", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "model.name")
    assert not results.exists() and not (tmp_path.parent / "esc").exists() and not (tmp_path.parent / "evil").exists()


def test_paths_built_from_names_are_checked_before_a_write(tmp_path):
    from madara_cli.config.identity import Cell
    from madara_cli.core.paths import inside

    assert inside(tmp_path, tmp_path / "g" / "k") == tmp_path / "g" / "k"
    with pytest.raises(PermissionError, match="outside the results folder"):
        inside(tmp_path, tmp_path / "g" / ".." / ".." / "x")
    # by whole names: a sibling that starts with the folder's name is outside it
    for root, path, ok in (("/r", "/r", True), ("/r", "/r/a", True), ("/r", "/rx", False), ("/r", "/rx/a", False), ("/", "/a", True),
                           ("/r/", "/r/a/", True), ("r", "r/a", True), ("r", "rr/a", False), ("/r", "/r/./../r/z", True),
                           ("/r", "/r/../x", False), ("/r/s", "/r", False), ("/r//s", "/r/s/t", True)):
        if ok:
            assert inside(root, path) == Path(path)
        else:
            with pytest.raises(PermissionError):
                inside(root, path)
    cell = Cell(grid="../../x", model="m", benchmark="b", strategy="nf", retriever="bm25s", k=10, seed=0, limit=1, config_hash="0")
    with pytest.raises(PermissionError):
        cell.folder(tmp_path / "results")


# --------------------------------------------------------------------------- #
# Snapshots verified


def _snapshot(results: Path) -> Path:
    [snap] = (results / "snapshots").glob("*.jsonl")
    return snap


def _edit_first_document(snap: Path) -> None:
    lines = snap.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    row["docs"][0]["text"] = "The tower stands in Rome. " + row["docs"][0]["text"]
    lines[0] = json.dumps(row, ensure_ascii=False)
    snap.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_snapshot_lines_carry_a_content_hash_checked_on_load(tmp_path):
    from madara_cli.results.record_files import read_predictions
    from madara_cli.retrievers.snapshots import content_hash

    results = tmp_path / "results"
    with fake_pool() as pool:
        first = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
        docs_first = [p["doc_ids"] for p in read_predictions(first.folder)]
        again = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}", "force=true"]), pool)
    rows = [json.loads(x) for x in _snapshot(results).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 and all(r["h"] == content_hash(r) for r in rows)
    # force=true re-runs the cell on the same frozen documents (nothing retrieved again).
    assert not again.skipped and [p["doc_ids"] for p in read_predictions(again.folder)] == docs_first


def test_must_show_edited_snapshot_then_force_is_one_line(monkeypatch, capsys, tmp_path):
    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=1", f"results_dir={results}"]), pool)
    snap = _snapshot(results)
    _edit_first_document(snap)
    before = tree(results)
    code, _, err = cli("run", "strategy=nf", "limit=1", "force=true", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, str(snap), "line 1", "content hash", "mv ")
    assert "force=true" in line  # says force does not rebuild it, and what does
    assert tree(results) == before


def test_moving_an_edited_snapshot_aside_rebuilds_it(tmp_path):
    results = tmp_path / "results"
    cfg = compose(["strategy=nf", "limit=1", f"results_dir={results}"])
    forced = compose(["strategy=nf", "limit=1", f"results_dir={results}", "force=true"])
    with fake_pool() as pool:
        run_cell(cfg, pool)
        snap = _snapshot(results)
        original = snap.read_bytes()
        _edit_first_document(snap)
        with pytest.raises(DataError, match="content hash"):
            run_cell(forced, pool)
        snap.rename(snap.with_name(snap.name + ".edited"))  # the mv the error gives; the meta file stays
        run_cell(forced, pool)
        run_cell(forced, pool)  # and the rebuilt snapshot (its ledger started afresh) reads back
    assert snap.read_bytes() == original  # retrieved again: the same documents, hashed


def _hand_edits():
    """Each edit a hand (or a tool) can make to a hashed snapshot file: (name, edit)."""

    def unhash_edited(lines):
        row = json.loads(lines[0])
        row["docs"][0]["text"] = "edited"
        del row["h"]
        lines[0] = json.dumps(row)
        return lines

    def append_unhashed_copy(lines):
        row = json.loads(lines[0])
        row["docs"][0]["text"] = "edited"
        del row["h"]
        return [*lines, json.dumps(row)]

    return {
        "unhashed edited line": (unhash_edited, "line 1", "no content hash"),
        "appended unhashed copy": (append_unhashed_copy, "line 3", "no content hash"),
        "removed line": (lambda lines: lines[1:], "lines were removed", "holds 1 lines"),
        "reordered lines": (lambda lines: lines[::-1], "lines 1-2", "reordered"),
        "replaced by another line": (lambda lines: [lines[0], lines[0]], "lines 1-2", "reordered"),
    }


@pytest.mark.parametrize("case", list(_hand_edits()))
def test_a_hand_edited_snapshot_stops_the_run_with_or_without_force(monkeypatch, capsys, no_engine, tmp_path, case):
    """Every line must carry its hash and the file must hold the lines its meta file's
    ledger records, in order: one line naming the file and line, and the mv, even
    under force=true; nothing of the finished cell is touched."""
    edit, *needles = _hand_edits()[case]
    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
    snap = _snapshot(results)
    snap.write_text("\n".join(edit(snap.read_text(encoding="utf-8").splitlines())) + "\n", encoding="utf-8")
    before = tree(results)
    for args in (["limit=3"], ["limit=2", "force=true"]):  # a new cell reading the snapshot; the finished one forced
        code, _, err = cli("run", "strategy=nf", *args, f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, str(snap), *needles, f"mv {snap} ")
    assert tree(results) == before


def test_a_meta_file_that_does_not_match_stops_the_run(monkeypatch, capsys, tmp_path):
    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=1", f"results_dir={results}"]), pool)
    snap = _snapshot(results)
    meta_path = snap.with_name(snap.name.replace(".jsonl", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    for body, needle in [
        (json.dumps({**meta, "retriever": {**meta["retriever"], "k": 99}}), "does not record this snapshot's key"),
        (json.dumps({**meta, "ledger": {"lines": "one"}}), "ledger is damaged"),
        ("[1, 2", "not a JSON object"),
    ]:
        meta_path.write_text(body)
        code, _, err = cli("run", "strategy=nf", "limit=1", "force=true", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, str(snap), meta_path.name, needle, "mv ")
    meta_path.write_text(json.dumps({**meta, "retriever": {**meta["retriever"], "k": 99}}))
    meta_path.rename(meta_path.with_name("moved.json"))
    code, _, err = cli("run", "strategy=nf", "limit=1", "force=true", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, str(snap), "has no meta file")
    # The mv the line gives rebuilds it, whatever the meta file beside it says.
    meta_path.with_name("moved.json").rename(meta_path)
    snap.rename(snap.with_name(snap.name + ".edited"))
    for _ in range(2):
        with fake_pool() as pool:
            run_cell(compose(["strategy=nf", "limit=1", f"results_dir={results}", "force=true"]), pool)
    assert json.loads(meta_path.read_text()) == meta


def test_a_meta_file_without_its_ledger_is_refused(monkeypatch, capsys, tmp_path):
    """Deleting the meta file's ``ledger`` must not make the file trusted as it is (the
    path snapshots from before the ledger took): one line naming the file and the mv,
    with or without force; the finished cell is untouched."""
    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
    snap = _snapshot(results)
    meta_path = snap.with_name(snap.name.replace(".jsonl", ".meta.json"))
    meta = json.loads(meta_path.read_text())
    assert meta["ledger"]["lines"] == 2
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "ledger"}))
    lines = snap.read_text(encoding="utf-8").splitlines()
    snap.write_text("\n".join(lines[::-1]) + "\n", encoding="utf-8")  # what the deleted ledger would have caught
    before = tree(results)
    for args in (["limit=3"], ["limit=2", "force=true"]):
        code, _, err = cli("run", "strategy=nf", *args, f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, str(snap), "without a ledger", f"mv {snap} ")
    assert tree(results) == before


def test_lines_appended_after_the_recorded_ones_are_dropped_never_used(tmp_path, caplog):
    """A hashed line added after the recorded ones without the ledger's appending mark
    (by hand, or by a madara from before the mark killed before its ledger update) is
    not a refusal: it is cut off with a warning and never read; its example is
    retrieved again."""
    from madara_cli.retrievers.snapshots import Snapshot

    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
        snap = _snapshot(results)
        original = snap.read_bytes()
        lines = snap.read_text(encoding="utf-8").splitlines()
        row = json.loads(lines[0])
        row["docs"][0]["text"] = "The tower stands in Rome."
        from madara_cli.retrievers.snapshots import content_hash

        row["h"] = content_hash(row)  # a forged line carrying a right hash: it would win over line 1 if read
        with snap.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        meta = json.loads(snap.with_name(snap.name.replace(".jsonl", ".meta.json")).read_text())
        loaded = Snapshot(results / "snapshots", {k: v for k, v in meta.items() if k != "ledger"}).load()
        assert "Rome" not in loaded[row["id"]][1][0].text
        assert snap.read_bytes() == original
        assert "dropped 1 line(s)" in caplog.text
        out = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}", "force=true"]), pool)
    assert not out.skipped and snap.read_bytes() == original


def test_a_torn_line_of_a_killed_writer_is_skipped_and_the_next_append_counts(tmp_path):
    from madara_cli.retrievers.snapshots import Snapshot

    results = tmp_path / "results"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=1", f"results_dir={results}"]), pool)
        snap_path = _snapshot(results)
        with snap_path.open("a") as f:
            f.write('{"id": "torn", "q": "ab')  # killed mid-write, before the ledger was updated
        out = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
    assert not out.skipped
    meta = json.loads(snap_path.with_name(snap_path.name.replace(".jsonl", ".meta.json")).read_text())
    assert meta["ledger"]["lines"] == 2
    assert len(Snapshot(results / "snapshots", {k: v for k, v in meta.items() if k != "ledger"}).load()) == 2


def _run_killed_before_the_ledger_update(results: str) -> None:
    """A child process: the cell's retrieval appends its lines, then the process dies
    (os._exit, as under kill -9) where the ledger would have recorded them."""
    from madara_cli.retrievers.snapshots import Snapshot

    real = Snapshot._write_meta

    def die_before_recording(self, meta):
        if not meta["ledger"].get("appending") and meta["ledger"]["lines"] > 0:
            os._exit(9)
        real(self, meta)

    Snapshot._write_meta = die_before_recording
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)


def test_a_writer_killed_between_append_and_ledger_update_is_recorded_on_rerun(tmp_path, caplog):
    """The crash window: lines appended, the ledger not yet updated. madara had said
    "rerun the same command to resume", and the rerun refused the file as hand-edited.
    Now it records the killed writer's lines, retrieves nothing again and succeeds."""
    import multiprocessing as mp

    results = tmp_path / "results"
    child = mp.get_context("fork").Process(target=_run_killed_before_the_ledger_update, args=(str(results),))
    child.start()
    child.join(300)
    assert child.exitcode == 9
    snap = _snapshot(results)
    meta_path = snap.with_name(snap.name.replace(".jsonl", ".meta.json"))
    written = snap.read_bytes()
    assert written.count(b"\n") == 2 and json.loads(meta_path.read_text())["ledger"] == {"lines": 0, "chain": "", "appending": True}
    with fake_pool() as pool:
        out = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={results}"]), pool)
    assert not out.skipped and (out.folder / "metrics.json").is_file()
    assert snap.read_bytes() == written  # nothing retrieved again
    ledger = json.loads(meta_path.read_text())["ledger"]
    assert ledger["lines"] == 2 and "appending" not in ledger
    assert "recorded 2 line(s) a writer appended before it was stopped" in caplog.text


def test_a_large_snapshot_holds_each_passage_text_once(tmp_path):
    """madara plan on 50,000 queries held a copy of a passage per query that retrieved it
    (docs/benchmarks.md): a load shares one copy among the lines, and an index's corpus
    file reads a passage once."""
    from madara_cli.core.records import Doc, Example
    from madara_cli.retrievers.saved_index import build_index, iter_corpus
    from madara_cli.retrievers.snapshots import Snapshot

    passage = "The tower stands in Paris. " * 20
    snap = Snapshot(tmp_path / "snapshots", {"benchmark": {"name": "b"}, "retriever": {"name": "r", "k": 1}})
    rows = [(Example(id=f"q{i}", question=f"q{i}?", answers=("a",)), [Doc(id="d", text=passage, title="T")], {}) for i in range(3)]
    assert snap.append(rows) == 3
    loaded = snap.load()
    texts = [docs[0].text for _, docs, _ in loaded.values()]
    assert texts == [passage] * 3 and texts[0] is texts[1] is texts[2]

    from madara_cli.retrievers.saved_index import CorpusFile

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": "T", "text": f"passage {i}"}) + "\n" for i in range(3)))
    index = build_index(corpus, tmp_path / "idx", compose(["retriever=bm25s"]).retriever, progress=False)
    files = CorpusFile(index / "corpus.jsonl")
    assert files[1] is files[1] and files[1].text == "passage 1" and len(list(iter_corpus(corpus))) == 3


def test_a_snapshot_checked_once_is_checked_again_after_any_edit(tmp_path, monkeypatch):
    """A plan reads one snapshot per cell: what a whole check found is kept by the file's
    stamp (change time included), so a second load does not scan again, and an edit,
    even one that keeps the size and puts the mtime back, is checked and refused."""
    import time

    from madara_cli.core.errors import SnapshotError
    from madara_cli.core.records import Doc, Example
    from madara_cli.retrievers import snapshots

    monkeypatch.setattr(snapshots, "_RACY_NS", 0)  # here: kept at once (the guard is 2 s)
    monkeypatch.setattr(snapshots, "_CHECKED", {})
    snap = snapshots.Snapshot(tmp_path / "snapshots", {"benchmark": {"name": "b"}, "retriever": {"name": "r", "k": 1}})
    snap.append([(Example(id="q1", question="q?", answers=("a",)), [Doc(id="d", text="The tower is in Paris.", title="T")], {})])
    first = snap.load()
    scans = []
    monkeypatch.setattr(snapshots.Snapshot, "_scan", lambda self, upto, real=snapshots.Snapshot._scan: scans.append(1) or real(self, upto))
    assert snap.load() == first and scans == []  # kept: not scanned again
    time.sleep(0.05)  # past the file system's clock tick
    st = snap.path.stat()
    snap.path.write_text(snap.path.read_text().replace("Paris", "Rome!"))
    os.utime(snap.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(SnapshotError, match="content hash"):
        snap.load()
    assert scans == [1]


# --------------------------------------------------------------------------- #
# Files that are not UTF-8, YAML that is broken or tagged


def _musique_line(qid: str, question: str = "Where is the tower?") -> str:
    row = {"id": qid, "question": question, "answer": "Paris", "answer_aliases": [],
           "paragraphs": [{"idx": i, "title": f"T{i}", "paragraph_text": f"The tower {i} is in Paris.", "is_supporting": i == 0} for i in range(3)]}
    return json.dumps(row, ensure_ascii=False) + "\n"


def test_must_show_non_utf8_benchmark_file_is_one_line_and_leaves_no_folder(monkeypatch, capsys, tmp_path):
    bench = tmp_path / "bench.jsonl"
    good = _musique_line("2hop__1").encode()
    bench.write_bytes(good + _musique_line("2hop__2", "Where is the caf\u00e9?").encode().replace("\u00e9".encode(), b"\xe9"))
    offset = len(good) + _musique_line("2hop__2", "Where is the caf").encode().index(b"caf") + 3
    for results in (tmp_path / "new-results", tmp_path / "old-results"):
        if results.name == "old-results":
            results.mkdir()
        code, _, err = cli("run", "benchmark=musique", f"benchmark.path={bench}", "strategy=nf", "limit=1",
                              f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, str(bench), "not UTF-8", f"offset {offset}", "line 2", "0xe9")
    assert tree(tmp_path) == ["bench.jsonl", "old-results"]  # no adhoc/, no new results folder


def test_non_utf8_corpus_names_the_byte(tmp_path):
    from madara_cli.retrievers.saved_index import iter_corpus

    corpus = tmp_path / "corpus.jsonl"
    body = b'{"id": "1", "title": "a", "text": "ok"}\n{"id": "2", "title": "b", "text": "\xff"}\n'
    corpus.write_bytes(body)
    at = body.index(b"\xff")
    with pytest.raises(DataError, match=rf"corpus\.jsonl: the corpus is not UTF-8 text: byte 0xff at offset {at} \(line 2\)"):
        list(iter_corpus(corpus))


@pytest.mark.parametrize(
    "body,needles",
    [
        ("defaults:\n  - nf_schema\nname: nf\n  top_k: [1\n", ("line 4",)),
        ("defaults:\n  - nf_schema\nname: !!python/object/apply:os.system ['touch {marker}']\n", ("line 3", "tag", "never objects")),
        ("name: nf\ntop_k: \xff\n", ("not UTF-8", "offset")),
        ("name: nf\ntop_k: " + "[" * 5000 + "]" * 5000 + "\n", ("nested too deeply",)),
        ("name: nf\ntop_k: " + "7" * 5000 + "\n", ("more than 4,300 digits",)),
        ('name: "nf\\ud800"\n', ("not Unicode text",)),
    ],
)
def test_broken_or_tagged_yaml_under_config_dir_is_one_line(monkeypatch, capsys, tmp_path, body, needles):
    user = tmp_path / "mine"
    (user / "strategy").mkdir(parents=True)
    marker = tmp_path / "executed"
    path = user / "strategy" / "mine.yaml"
    path.write_bytes(body.format(marker=marker).encode("latin-1"))
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")  # recorded, so the --config-dir the run adds is undone
    code, _, err = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=mine", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, str(path), *needles)
    assert not marker.exists()  # nothing in it ran


# --------------------------------------------------------------------------- #
# A full disk; an unwritable HOME or cache folder


def test_full_cache_says_no_space_not_damaged(tmp_path):
    """SQLite's own SQLITE_FULL (max_page_count stands in for the disk)."""
    cache = ResponseCache(tmp_path / "cache.sqlite")
    cache.put_many("fp", "chat", [("k0", Completion(text="x"))])
    pages = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(CacheError) as e:
        cache.put_many("fp", "chat", [(f"k{i}", Completion(text="x" * 4000)) for i in range(1, 50)])
    text = str(e.value)
    assert text.startswith(f"no space left on {tmp_path}") and "damaged" in text and "not damaged" in text
    assert "mv " not in text and "\n" not in text
    cache._db.execute("PRAGMA max_page_count=1073741823")
    assert set(cache.get_many(["k0"])) == {"k0"}  # the cache was healthy all along
    cache.close()


def test_disk_io_error_on_a_full_disk_is_no_space_and_otherwise_not_damaged(tmp_path, monkeypatch):
    from madara_cli.backends import cache as cache_mod

    io = sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr(cache_mod, "_free_bytes", lambda folder: 0)
    assert str(_cache_error(tmp_path / "c.sqlite", io)).startswith(f"no space left on {tmp_path}")
    monkeypatch.setattr(cache_mod, "_free_bytes", lambda folder: 10 << 30)
    text = str(_cache_error(tmp_path / "c.sqlite", io))
    assert "mv " not in text and "not known to be damaged" in text
    real = str(_cache_error(tmp_path / "c.sqlite", sqlite3.DatabaseError("database disk image is malformed")))
    assert "is damaged" in real and "mv " in real


def test_full_disk_during_a_snapshot_write_is_one_line(monkeypatch, capsys, tmp_path):
    """A real ENOSPC: the snapshot file is /dev/full."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    first = tmp_path / "first"
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=1", f"results_dir={first}"]), pool)
    name = _snapshot(first).name
    results = tmp_path / "results"
    (results / "snapshots").mkdir(parents=True)
    (results / "snapshots" / name).symlink_to("/dev/full")
    code, _, err = cli("run", "strategy=nf", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, f"no space left on {results / 'snapshots' / name}")
    assert "damaged" not in line
    assert not (results / "adhoc").exists()


def test_full_disk_while_writing_a_cell_names_it_and_leaves_no_partial_copy(tmp_path):
    from madara_cli.results import record_files

    def rows():
        yield {"id": "1"}
        raise OSError(errno.ENOSPC, "No space left on device")  # what write() raises on a full disk

    folder = tmp_path / "grid" / "key"
    with pytest.raises(OSError) as e:
        record_files.write_cell(folder, None, "a: 1\n", rows())  # type: ignore[arg-type]
    assert e.value.errno == errno.ENOSPC and e.value.filename and "key" in e.value.filename
    assert tree(tmp_path) == ["grid"]  # the .tmp-* copy is gone


def test_no_space_line_from_the_entry_point(monkeypatch, capsys):
    from madara_cli import cli as entry
    from madara_cli.core.paths import writing

    @entry.app.command("fill-disk", hidden=True)
    def fill_disk():
        with writing("/r/adhoc/cell/predictions.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")

    try:
        code, _, err = cli("fill-disk", monkeypatch=monkeypatch, capsys=capsys)
    finally:
        entry.app.registered_commands.pop()
    line = one_line_error(code, err, "no space left on /r/adhoc/cell/predictions.jsonl", "finished cells and cached completions are kept")
    assert "damaged" not in line


def test_unwritable_cache_folder_names_it(monkeypatch, capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with fake_pool() as pool:
        run_cell(compose(["strategy=nf", "limit=1", f"results_dir={tmp_path / 'r'}"]), pool)  # the snapshot exists: the cache is next
    code, _, err = cli("run", "strategy=nf", "limit=1", "force=true", f"results_dir={tmp_path / 'r'}",
                          f"cache={blocker / 'cache' / 'cache.sqlite'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "cannot use", str(blocker))


def test_a_local_benchmark_file_needs_no_writable_home(monkeypatch, tmp_path):
    """HOME under a plain file (no folder can be made there, whoever runs the test): a
    local benchmark file is read without the datasets cache, which it once needed."""
    import datasets.config

    from madara_cli.data.sources import read_local

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for var in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(blocker / "home"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", Path(blocker / "home" / ".cache" / "huggingface" / "datasets"))
    for name, text in (("bench.jsonl", _musique_line("2hop__1")), ("bench.csv", "id,question\nq1,Where?\n"),
                       ("bench.tsv", "id\tquestion\nq1\tWhere?\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        (row,) = read_local(tmp_path / name)
        assert row["id"] in ("2hop__1", "q1")


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("benchmark", ["musique", "jsonl"])
def test_a_fifo_or_a_device_as_the_benchmark_file_says_what_it_is(monkeypatch, capsys, tmp_path, kind, benchmark):
    """A FIFO or /dev/zero as benchmark.path was "file not found"; it is named for what it
    is, at once (a FIFO is never opened to block, /dev/zero never read)."""
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "bench.jsonl"
        os.mkfifo(path)
    code, _, err = cli("run", f"benchmark={benchmark}", f"benchmark.path={path}", "strategy=nf", "limit=1",
                       f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, str(path), "a FIFO" if kind == "fifo" else "a character device", "not a regular file")
    assert "not found" not in line and not (tmp_path / "r").exists()


def _opens_of(monkeypatch, target: Path) -> list[str]:
    """Every open of ``target`` from here on (Python's open, pathlib's, os.open): a file is
    opened once for each time it is read whole."""
    import builtins
    import io

    seen: list[str] = []
    real_os_open, real_open = os.open, io.open
    want = os.path.realpath(target)

    def os_open(path, *args, **kwargs):
        if os.path.realpath(os.fspath(path)) == want:
            seen.append("os.open")
        return real_os_open(path, *args, **kwargs)

    def py_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(os.fspath(file)) == want:
            seen.append("open")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", py_open)
    monkeypatch.setattr(builtins, "open", py_open)
    return seen


@pytest.mark.parametrize("shape", ["musique", "jsonl", "corpus"])
def test_a_large_file_is_read_once_before_its_error_line(monkeypatch, capsys, tmp_path, shape):
    """A 2 GB file was read three times (its digest, a UTF-8 pass, a JSON pass; a corpus:
    its digest, a line count, its parse) before the one line saying its last line is bad,
    and twice with its digest remembered. Counted on a few megabytes: once for its digest,
    once for everything else; with the digest remembered, once."""
    rows = {
        "musique": lambda i: _musique_line(f"2hop__{i}"),
        "jsonl": lambda i: json.dumps({"id": f"q{i}", "question": "Where is the tower?", "answers": ["Paris"],
                                       "documents": ["The tower is in Paris. " * 8]}) + "\n",
        "corpus": lambda i: json.dumps({"id": f"d{i}", "title": f"T{i}", "text": "The tower is in Paris. " * 8}) + "\n",
    }[shape]
    big = tmp_path / ("corpus.jsonl" if shape == "corpus" else "bench.jsonl")
    big.write_text("".join(rows(i) for i in range(12_000)) + "[1]\n", encoding="utf-8")
    assert big.stat().st_size > 2_000_000
    args = [f"benchmark={shape}", f"benchmark.path={big}"]
    if shape == "corpus":
        questions = tmp_path / "questions.jsonl"
        questions.write_text(json.dumps({"question": "Where is the tower?", "answers": ["Paris"]}) + "\n", encoding="utf-8")
        args = ["benchmark=jsonl", f"benchmark.path={questions}", f"benchmark.corpus={big}"]
    opens = _opens_of(monkeypatch, big)
    for remembered in (False, True):
        opens.clear()
        code, _, err = cli("run", *args, "strategy=nf", "limit=1", "benchmark.calibration=0", f"results_dir={tmp_path / 'r'}",
                           monkeypatch=monkeypatch, capsys=capsys)
        one_line_error(code, err, str(big), ":12001:", "JSON object")
        assert len(opens) == (1 if remembered else 2), opens


def test_a_cache_folder_that_cannot_be_written_only_costs_the_digest_memo(monkeypatch, capsys, tmp_path):
    """A read-only MADARA_CACHE stopped a plan, although the digest memo it holds only saves
    work: a warning naming it, and the plan goes on. (The cache folder is under a plain
    file, which nobody can write, root included.)"""
    from madara_cli.config import identity
    from madara_cli.experiment import plan as plan_module

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bench = tmp_path / "bench.jsonl"
    bench.write_text(_musique_line("2hop__1"), encoding="utf-8")
    monkeypatch.setattr(identity, "DISK_MEMO_BYTES", 1)  # this small file's digest is memoised on disk
    monkeypatch.setattr(plan_module, "_fingerprint", lambda cfg: "fake")
    code, out, err = cli("plan", "benchmark=musique", f"benchmark.path={bench}", "strategy=nf", "benchmark.calibration=0",
                         f"results_dir={tmp_path / 'r'}", env={"MADARA_CACHE": str(blocker / "cache")}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert f"cannot keep {blocker / 'cache' / identity.MEMO_FILE}" in err and "MADARA_CACHE" in err
    assert "plan: one cell" in out


# --------------------------------------------------------------------------- #
# No empty folders left by a run that failed before its first cell


def test_failed_run_leaves_the_results_folder_as_it_found_it(tmp_path):
    from madara_cli.results.record_files import no_empty_folders_left

    results = tmp_path / "deep" / "results"
    (tmp_path / "keep").mkdir()
    with pytest.raises(DataError):
        with no_empty_folders_left([results]):
            (results / "adhoc").mkdir(parents=True)
            (results / "snapshots" / "x").mkdir(parents=True)
            raise DataError("bad file")
    assert tree(tmp_path) == ["keep"]
    with pytest.raises(ConfigError):
        with no_empty_folders_left([results]):
            (results / "adhoc").mkdir(parents=True)
            (results / "cache.sqlite").write_text("")  # something was written: its folder stays
            raise ConfigError("late")
    assert tree(tmp_path) == ["deep", "deep/results", "deep/results/cache.sqlite", "keep"]
