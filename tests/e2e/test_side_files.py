"""Hostile inputs, round three: the files madara reads back on a rerun, from a cache,
a shared results folder or a ``--config-dir``. Each is read through one guarded reader
(:mod:`madara_cli.core.sidefiles`): a cut or newer-format cache row is a counted miss that
is recomputed, a cut index meta or memo is named in one line (or rebuilt), a cell's
``config.yaml`` is plain data, a plug-in's exception of any kind is one line; a
``--config-dir`` is parsed only where a command selects it, regular files only, no
aliases; stored text reaches the terminal escaped. Nothing finished is lost.

Like tests/e2e/test_bad_input.py, CLI cases go through the real entry point in process;
cases that need an engine use the deterministic fake engine.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from madara_cli.backends.cache import CachedLLM, ResponseCache, _decode
from madara_cli.backends.shards import ShardedCache, merge_shards, shard_dir
from madara_cli.composition import compose
from madara_cli.core.errors import DataError
from madara_cli.core.records import ChatRequest, Completion, Message
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from tests.fakes import FakeBackend, cli, one_line_error, spawn


def fake_pool() -> EnginePool:
    return EnginePool(factory=lambda cfg: FakeBackend())


# --------------------------------------------------------------------------- #
# Response-cache rows


def _request(i: int) -> ChatRequest:
    return ChatRequest(messages=(Message("user", f"question {i}"),), max_tokens=8)


def _rows(path: Path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT key, completion FROM completions").fetchall())
    finally:
        db.close()


def _overwrite(path: Path, key: str, completion: str) -> None:
    db = sqlite3.connect(path)
    try:
        db.execute("UPDATE completions SET completion = ? WHERE key = ?", (completion, key))
        db.commit()
    finally:
        db.close()


NEWER_ROW = json.dumps({"text": "from a newer madara", "tokens_in": 3, "tokens_out": 2, "seconds": 0.1, "finish_reason": "stop",
                        "logprobs": None, "truncated": False, "reasoning_tokens": 7})
UNREADABLE_ROWS = {
    "cut": '{"text": "half a rep',
    "newer format": NEWER_ROW,
    "not an object": "[1, 2]",
    "wrong type": json.dumps({"text": ["a", "list"], "tokens_in": 1}),
    "non-numeric logprob": json.dumps({"text": "", "logprobs": {"1": "high"}}),
}


@pytest.mark.parametrize("case", list(UNREADABLE_ROWS))
def test_an_unreadable_cache_row_is_a_counted_miss_recomputed_once(tmp_path, case):
    """A row this madara cannot read failed the cell on every rerun; now it is a miss,
    counted, sent again and stored over the row, so the next rerun is a plain hit."""
    path = tmp_path / "cache.sqlite"
    backend = FakeBackend()
    llm = CachedLLM(backend, ResponseCache(path))
    first = llm.chat("generate", [_request(0), _request(1)])
    key = next(iter(_rows(path)))
    _overwrite(path, key, UNREADABLE_ROWS[case])

    again = CachedLLM(backend, ResponseCache(path))
    with again.fresh_accounting() as acc:
        second = again.chat("generate", [_request(0), _request(1)])
    stage = acc.stage("generate")
    assert [c.text for c in second] == [c.text for c in first]
    assert (stage.cache_unreadable, stage.cache_hits, stage.calls_issued) == (1, 1, 1)
    assert _decode(_rows(path)[key]) is not None  # the recomputed reply was stored over the row
    with again.fresh_accounting() as acc:
        again.chat("generate", [_request(0), _request(1)])
    assert (acc.stage("generate").cache_unreadable, acc.stage("generate").cache_hits) == (0, 2)
    assert "cache_unreadable" in acc.to_dict()


def test_a_cut_row_does_not_break_plan_s_rate_estimate(tmp_path):
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path)
    cache.put_many("fp", "chat", [("a", Completion(text="x", seconds=2.0)), ("b", Completion(text="y", seconds=4.0))])
    _overwrite(path, "b", '{"text": "cut')
    assert cache.seconds_per_call("fp") == {"chat": (2.0, 1)}


def test_a_sharded_job_reads_an_unreadable_main_cache_row_as_a_miss(tmp_path):
    cache = tmp_path / "cache.sqlite"
    base = ResponseCache(cache)
    base.put_many("fp", "chat", [("good", Completion(text="kept")), ("newer", Completion(text="old"))])
    base.close()
    _overwrite(cache, "newer", NEWER_ROW)
    job = ShardedCache(cache, worker="w")
    assert set(job.get_many(["good", "newer"])) == {"good"} and job.unreadable == 1
    job.close()


def test_cache_merge_skips_unreadable_rows_says_how_many_and_keeps_their_shard(monkeypatch, capsys, tmp_path):
    """`madara cache merge` copied a newer madara's rows (and cut ones) into the cache,
    where every rerun met them; now it copies only the rows this madara can read, says
    how many it skipped, and keeps the shard that holds them for a madara that can."""
    cache = tmp_path / "cache.sqlite"
    ResponseCache(cache).close()
    shard = ShardedCache(cache, worker="newer-node")
    shard.put_many("fp", "chat", [("ok", Completion(text="fine")), ("newer", Completion(text="x")), ("cut", Completion(text="y"))])
    shard.close()
    shard_path = shard_dir(cache) / "newer-node.sqlite"
    _overwrite(shard_path, "newer", NEWER_ROW)
    _overwrite(shard_path, "cut", '{"text": "cu')

    code, out, err = cli("cache", "merge", "--cache", str(cache), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert set(_rows(cache)) == {"ok"}
    assert "merged 1 shards" in out and "1 entries" in out
    line = one_line_error(1, err, "skipped 2 entries this madara cannot read", "newer-node.sqlite")
    assert "kept" in line
    assert shard_path.is_file()
    again = merge_shards(cache)  # idempotent: the same two skipped, nothing copied twice
    assert (again.skipped, again.added, set(_rows(cache))) == (2, 0, {"ok"})


# --------------------------------------------------------------------------- #
# Index meta and memo files


def _index(tmp_path: Path) -> tuple[Path, Path]:
    from madara_cli.retrievers.saved_index import build_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": "T", "text": f"passage {i} about towers"}) + "\n" for i in range(4)))
    return corpus, build_index(corpus, tmp_path / "indexes", compose(["retriever=bm25s"]).retriever, progress=False)


@pytest.mark.parametrize("body,needle", [
    ('{"format": 1, "settings": {"kind": "bm2', "not valid JSON"),
    ("[1, 2]", "holds list, not a JSON object"),
    (b"\xff\xfe", "not UTF-8 text"),
])
def test_a_cut_index_meta_is_one_line_naming_it(monkeypatch, capsys, no_engine, tmp_path, body, needle):
    corpus, index = _index(tmp_path)
    meta = index / "madara_index.json"
    meta.write_bytes(body if isinstance(body, bytes) else body.encode())
    code, _, err = cli("index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "indexes"), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, str(meta), needle, "mv ")
    code, _, err = cli("run", "strategy=nf", "limit=1", f"retriever.index={index}", f"results_dir={tmp_path / 'r'}",
                       monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, str(meta), needle)


@pytest.mark.parametrize("memo", ["[1, 2, 3]", b'{"a": "\xff"}', '{"x": {"stamp": [1]', '"just text"'])
def test_a_damaged_hash_memo_is_rebuilt_not_a_traceback(tmp_path, caplog, monkeypatch, memo):
    """The digests of large files (a corpus, a GGUF) are remembered on disk: a damaged memo
    is named, ignored and rebuilt."""
    from madara_cli.config import identity
    from madara_cli.retrievers.saved_index import corpus_sha256

    monkeypatch.setenv("MADARA_CACHE", str(tmp_path / "memo"))
    monkeypatch.setattr(identity, "DISK_MEMO_BYTES", 0)  # every file is large here
    monkeypatch.setattr(identity, "_FILE_DIGESTS", {})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "text": "a"}\n')
    memo_file = tmp_path / "memo" / identity.MEMO_FILE
    memo_file.parent.mkdir()
    memo_file.write_bytes(memo if isinstance(memo, bytes) else memo.encode())
    want = identity._sha256_of(corpus)
    assert corpus_sha256(corpus) == want
    assert str(memo_file) in caplog.text and "rebuilt" in caplog.text
    assert json.loads(memo_file.read_text(encoding="utf-8"))[str(corpus.resolve())]["sha256"] == want


def test_a_same_size_edit_with_its_mtime_put_back_is_hashed_again(tmp_path, monkeypatch):
    """The memo was keyed by size and mtime: ``touch -r`` after a same-size edit reused
    the old hash, so the old snapshot, even under force=true. Now the stamp holds the
    inode and ctime too, which no user call can put back (in the process and on disk)."""
    from madara_cli.config import identity
    from madara_cli.core.sidefiles import file_stamp
    from madara_cli.retrievers.saved_index import corpus_sha256

    monkeypatch.setenv("MADARA_CACHE", str(tmp_path / "memo"))
    monkeypatch.setattr(identity, "DISK_MEMO_BYTES", 0)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "text": "The tower is in Paris."}\n')
    before = corpus_sha256(corpus)
    st = corpus.stat()
    time.sleep(0.01)
    corpus.write_text('{"id": "1", "text": "The tower is in Rome!."}\n')
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: size and mtime as they were
    assert (corpus.stat().st_size, corpus.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert file_stamp(corpus) != (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    after = corpus_sha256(corpus)
    monkeypatch.setattr(identity, "_FILE_DIGESTS", {})  # a new process: only the disk memo
    assert after != before and after == corpus_sha256(corpus) == identity._sha256_of(corpus)


def test_a_prompt_template_edited_with_its_mtime_put_back_is_read_again(tmp_path):
    """A loaded prompt set is kept in memory by its files' stamps; its digest enters cell
    keys, so a stale set would reuse cells of the old wording."""
    import shutil

    from madara_cli.config.folders import config_dir
    from madara_cli.config.prompt_sets import load_prompt_set

    folder = tmp_path / "prompts" / "mine"
    folder.mkdir(parents=True)
    (folder / "set.yaml").write_text("extends: madara\n")
    template = folder / "factoid_system.txt"
    shutil.copy(config_dir() / "prompts" / "madara" / "factoid_system.txt", template)
    text = template.read_text()
    before = load_prompt_set("mine", [tmp_path, config_dir()]).render("factoid_system")
    st = template.stat()
    template.write_text("X" + text[1:])  # same size
    os.utime(template, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = load_prompt_set("mine", [tmp_path, config_dir()]).render("factoid_system")
    assert after != before and after.startswith("X")


# --------------------------------------------------------------------------- #
# A finished cell read by `madara show`


@pytest.fixture
def finished_cell(tmp_path) -> Path:
    with fake_pool() as pool:
        out = run_cell(compose(["strategy=nf", "limit=1", f"results_dir={tmp_path / 'results'}"]), pool)
    return out.folder


def test_show_of_a_config_yaml_with_a_python_tag_neither_runs_it_nor_tracebacks(monkeypatch, capsys, tmp_path, finished_cell):
    marker = tmp_path / "executed"
    config = finished_cell / "config.yaml"
    config.write_text(config.read_text() + f"evil: !!python/object/apply:os.system ['touch {marker}']\n")
    code, out, err = cli("show", str(finished_cell), "--all", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "Traceback" not in err, err
    assert "unreadable" in out and "tag" in out
    assert not marker.exists()


def test_show_escapes_control_characters_of_someone_else_s_metrics(monkeypatch, capsys, finished_cell):
    """provenance.host of a shared results folder reached the terminal raw: an escape
    sequence there could retitle the window, clear the screen or forge a line."""
    metrics = finished_cell / "metrics.json"
    record = json.loads(metrics.read_text())
    record["provenance"]["host"] = "node\x1b]0;owned\x07\x1b[2J\u202ex\x9b31m"
    metrics.write_text(json.dumps(record))
    for args in ((), ("--json",)):
        code, out, err = cli("show", str(finished_cell), *args, monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), repr(out)
    assert "node\\x1b]0;owned\\x07\\x1b[2J\\u202ex\\x9b31m" in cli("show", str(finished_cell), "--all", monkeypatch=monkeypatch, capsys=capsys)[1]
    assert json.loads(out)["provenance"]["host"] == record["provenance"]["host"]  # --json stays JSON, the same text


def test_an_error_line_quoting_a_file_name_is_escaped(monkeypatch, capsys, tmp_path):
    code, _, err = cli("show", "cell\x1b[2J", "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, "cell\\x1b[2J")
    assert "\x1b" not in line


# --------------------------------------------------------------------------- #
# Plug-ins raising a BaseException of their own


@pytest.mark.parametrize("body,needle", [
    ("class Quit(BaseException):\n    pass\nraise Quit('stop')\n", "Quit: stop"),
    ("raise GeneratorExit('bye')\n", "GeneratorExit: bye"),
])
def test_an_include_raising_a_base_exception_is_one_line(monkeypatch, capsys, tmp_path, body, needle):
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "quit.py").write_text(body)
    monkeypatch.setenv("MADARA_INCLUDE", "")
    code, _, err = cli("--include", str(tmp_path / "plug"), "run", "--cfg", "job", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2
    one_line_error(code, err, "quit.py", needle)


# --------------------------------------------------------------------------- #
# --config-dir: only what a command selects, regular files, no aliases

ALIAS_BOMB = "".join(f"{x}: &{x} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                     for x, p in zip("abcdefghi", ["", *"abcdefgh"]))


def _config_dir(tmp_path: Path) -> Path:
    user = tmp_path / "mine"
    (user / "strategy").mkdir(parents=True)
    (user / "strategy" / "mine.yaml").write_text("defaults:\n  - nf_schema\n  - _self_\nname: nf\n")
    return user


def test_a_fifo_or_an_alias_bomb_nobody_selects_costs_nothing(monkeypatch, capsys, tmp_path):
    """Every YAML of a --config-dir was parsed up front: a FIFO named strategy/x.yaml
    blocked every command forever, nine lines of aliases did not answer in 120 s, a
    20 MB file took minutes. Now a command reads only what it selects."""
    user = _config_dir(tmp_path)
    os.mkfifo(user / "strategy" / "fifo.yaml")
    (user / "strategy" / "bomb.yaml").write_text(ALIAS_BOMB)
    with (user / "strategy" / "big.yaml").open("w") as f:
        f.write("name: nf\nitems:\n")
        f.writelines(f"  - {i}\n" for i in range(2_600_000))
    assert (user / "strategy" / "big.yaml").stat().st_size > 20_000_000
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    t0 = time.perf_counter()
    code, out, err = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=mine", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "name: nf" in out
    assert time.perf_counter() - t0 < 60  # a 20 MB parse took minutes; composing alone is seconds
    code, out, _ = cli("--config-dir", str(user), "ls", "strategies", monkeypatch=monkeypatch, capsys=capsys)
    # the FIFO is no option: never listed, never opened (the temporary folder's own name
    # holds "fifo", so the check is on the listed names)
    listed = [ln.split(":", 1)[0] for ln in out.splitlines()]
    assert code == 0 and "mine" in listed and "fifo" not in listed and "fifo.yaml" not in out
    # the 20 MB file is listed, refused unread (ls took 13 minutes parsing it)
    big = next(ln for ln in out.splitlines() if ln.startswith("big:"))
    assert "unreadable" in big and "MiB, over its limit" in big
    assert time.perf_counter() - t0 < 60
    code, _, err = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=big", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "big.yaml", "over its limit")


@pytest.mark.parametrize("name,needles", [
    ("fifo", ("fifo.yaml", "a FIFO, not a regular file")),
    ("bomb", ("bomb.yaml", "line 2", "alias", "refused")),
])
def test_a_selected_fifo_or_alias_bomb_is_one_line_at_once(monkeypatch, capsys, tmp_path, name, needles):
    user = _config_dir(tmp_path)
    if name == "fifo":
        os.mkfifo(user / "strategy" / "fifo.yaml")
    else:
        (user / "strategy" / "bomb.yaml").write_text(ALIAS_BOMB)
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    code, _, err = cli("--config-dir", str(user), "run", "--cfg", "job", f"strategy={name}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, *needles)


def test_an_alias_in_a_file_a_selected_file_names_is_refused(monkeypatch, capsys, tmp_path):
    user = _config_dir(tmp_path)
    (user / "reading").mkdir()
    (user / "reading" / "loud.yaml").write_text("# @package _global_\nreading: &r\n  name: loud\nother: *r\n")
    (user / "strategy" / "mine.yaml").write_text("defaults:\n  - nf_schema\n  - /reading: loud\n  - _self_\nname: nf\n")
    monkeypatch.setenv("MADARA_CONFIG_DIR", "")
    code, _, err = cli("--config-dir", str(user), "run", "--cfg", "job", "strategy=mine", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "loud.yaml", "alias")


_CLEANUP_RAISES = """
import time
from madara_cli import cli

@cli.app.command("compose-slowly")
def compose_slowly():
    print("ready", flush=True)
    try:
        time.sleep(120)  # a long parse under way
    finally:
        # What OmegaConf's flag_override does when the interrupt lands inside it: its
        # clean-up raises over the interrupt, and the interrupt is gone.
        raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")
"""


def test_sigterm_turned_into_another_error_by_a_library_still_says_terminated():
    """SIGTERM while OmegaConf parsed a large --config-dir file printed OmegaConf's own
    error (its clean-up raising over the interrupt) instead of "terminated"."""
    proc = spawn("compose-slowly", prelude=_CLEANUP_RAISES, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    one_line_error(proc.returncode, err, "terminated:", "rerun the same command to resume")


# --------------------------------------------------------------------------- #
# The guarded reader itself


def test_the_guarded_reader_names_the_file_and_never_blocks(tmp_path):
    from madara_cli.core.sidefiles import read_json, read_yaml_data

    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"x\.json: memo is a FIFO, not a regular file"):
        read_json(fifo, "memo")
    with pytest.raises(DataError, match=r"folder.*a folder, not a regular file"):
        (tmp_path / "folder").mkdir()
        read_json(tmp_path / "folder", "memo")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="nested too deeply"):
        read_json(deep, "memo")
    tagged = tmp_path / "c.yaml"
    tagged.write_text("a: !!python/object/apply:pathlib.Path ['x']\n")
    with pytest.raises(DataError, match="tag"):
        read_yaml_data(tagged, "config")


# --------------------------------------------------------------------------- #
# madara prompts import-reference CHECKOUT --out DIR


def _checkout(root: Path, word: str = "Zebra") -> Path:
    from tests.agents.test_reading_authors import _fake_checkout

    _fake_checkout(root)
    for f in (root / "madara").iterdir():
        f.write_text(f.read_text().replace("Zebra", word).replace("zebra", word.lower()))
    return root


def _import(monkeypatch, capsys, checkout: Path, out: Path) -> tuple[int, str, str]:
    return cli("prompts", "import-reference", str(checkout), "--out", str(out), monkeypatch=monkeypatch, capsys=capsys)


@pytest.mark.parametrize("link", ["prompts/authors", "prompts"])
def test_import_reference_refuses_a_linked_target_and_touches_nothing_behind_it(monkeypatch, capsys, tmp_path, link):
    """It deleted every *.txt in whatever DIR/prompts/authors linked to."""
    victim = tmp_path / "victim"
    (victim / "authors").mkdir(parents=True)
    (victim / "notes.txt").write_text("mine")
    (victim / "authors" / "notes.txt").write_text("mine too")
    out = tmp_path / "conf"
    (out / "prompts").mkdir(parents=True) if link == "prompts/authors" else out.mkdir()
    (out / link).symlink_to(victim / "authors" if link == "prompts/authors" else victim)
    code, _, err = _import(monkeypatch, capsys, _checkout(tmp_path / "ref"), out)
    one_line_error(code, err, str(out / link), "is a link")
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == ["authors", "authors/notes.txt", "notes.txt"]


def test_import_reference_refuses_an_out_that_is_a_file(monkeypatch, capsys, tmp_path):
    out = tmp_path / "conf"
    out.write_text("a file")
    code, _, err = _import(monkeypatch, capsys, _checkout(tmp_path / "ref"), out)
    one_line_error(code, err, str(out), "not a folder")
    assert out.read_text() == "a file"


@pytest.mark.parametrize("what", ["file", "folder", "fifo"])
def test_import_reference_never_reads_outside_the_checkout(monkeypatch, capsys, tmp_path, what):
    ref = _checkout(tmp_path / "ref")
    outside = tmp_path / "outside"
    outside.mkdir()
    if what == "file":
        (outside / "prompts.py").write_text((ref / "madara" / "prompts.py").read_text())
        (ref / "madara" / "prompts.py").unlink()
        (ref / "madara" / "prompts.py").symlink_to(outside / "prompts.py")
        needles = ("prompts.py", "a link out of the checkout")
    elif what == "folder":
        (ref / "madara").rename(outside / "madara")
        (ref / "madara").symlink_to(outside / "madara")
        needles = ("a link out of the checkout",)
    else:
        (ref / "madara" / "rsc.py").unlink()
        os.mkfifo(ref / "madara" / "rsc.py")
        needles = ("rsc.py", "a FIFO, not a regular file")
    code, _, err = _import(monkeypatch, capsys, ref, tmp_path / "conf")
    one_line_error(code, err, *needles)
    assert not (tmp_path / "conf" / "prompts").exists()


@pytest.mark.parametrize("source,needle", [
    ("X = " + "1+" * 200_000 + "1\n", "nested too deeply"),
    ("X = " + "-" * 200_000 + "1\n", "too large for memory"),
])
def test_import_reference_past_the_parser_s_limits_is_one_line(monkeypatch, capsys, tmp_path, source, needle):
    ref = _checkout(tmp_path / "ref")
    (ref / "madara" / "treatments.py").write_text(source)
    code, _, err = _import(monkeypatch, capsys, ref, tmp_path / "conf")
    one_line_error(code, err, str(ref), needle)


def _import_many(checkout: str, out: str, n: int) -> None:
    from madara_cli.config.reference_prompts import write_reference_set

    for _ in range(n):
        write_reference_set(checkout, out)


def test_two_imports_into_one_folder_each_leave_a_whole_set(tmp_path):
    """Deleting the old templates and writing the new ones in place let two imports mix
    their files (or fail on the other's deletions); now each renames a whole set in."""
    import multiprocessing as mp

    out = tmp_path / "conf"
    a, b = _checkout(tmp_path / "a", "Zebra"), _checkout(tmp_path / "b", "Yak")
    procs = [mp.get_context("fork").Process(target=_import_many, args=(str(c), str(out), 15)) for c in (a, b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    folder = out / "prompts" / "authors"
    words = {w for f in folder.glob("*_system.txt") for w in ("Zebra", "Yak") if w in f.read_text()}
    assert len(words) == 1, words
    from madara_cli.config.reference_prompts import reference_templates

    assert sorted(p.name for p in folder.iterdir()) == sorted([*(f"{n}.txt" for n in reference_templates(a)), "set.yaml"])
    assert sorted(p.name for p in (out / "prompts").iterdir()) == [".authors.lock", "authors"]
    assert not [p for p in out.iterdir() if p.name.startswith(".authors-import-")]


# --------------------------------------------------------------------------- #
# Other files a verb reads back: predictions of a shared cell, plan's bench rates


@pytest.mark.parametrize("line,needle", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"id": "q", "em": ' + "7" * 5000 + "}", "more than 4,300 digits"),
])
def test_compare_names_an_unreadable_predictions_line(monkeypatch, capsys, tmp_path, line, needle):
    with fake_pool() as pool:
        a = run_cell(compose(["strategy=nf", "limit=2", f"results_dir={tmp_path}"]), pool).folder
        b = run_cell(compose(["strategy=pde_random", "limit=2", f"results_dir={tmp_path}"]), pool).folder
    preds = b / "predictions.jsonl"
    preds.write_text(preds.read_text() + line + "\n")
    code, _, err = cli("compare", str(a), str(b), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, f"{preds}:3", needle)


@pytest.mark.parametrize("body", ['{"overhead": {"fingerprint": "fp", "requests": "many", "prefix_caching_on": {}}}',
                                  '{"overhead": {"fingerprint": "fp", "requests": 4, "prefix_caching_on": {"seconds_per_prompt_token": ["x"]}}}',
                                  '{"overhead": {"fingerprint": "fp", "requests": "many", "prefix_caching_on": '
                                  '{"seconds_per_prompt_token": 1e-3, "seconds_per_output_token": 2e-2}}}',
                                  '{"overhead": [1]}', "[" * 100_000, '{"overh', '["overhead"]'])
def test_an_odd_bench_file_only_means_no_measured_rates(tmp_path, body):
    from madara_cli.experiment.engine_time import bench_rates

    (tmp_path / "vllm.json").write_text(body)
    assert bench_rates(tmp_path, "fp") is None
