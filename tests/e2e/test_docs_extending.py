"""docs/extending.md's worked examples, as written: every ``# file:`` block is written into a
folder, and every ``madara`` command of the page runs there (a strategy, a backend and a
benchmark, each two files; no model is needed: the page's own backend answers)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.fakes import cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w+)\n(.*?)```", PAGE, re.S)]


def test_each_kind_is_at_most_three_files():
    files = [body.splitlines()[0].removeprefix("# file: ") for lang, body in blocks() if body.startswith("# file: ")]
    assert len(files) == 6 and all(f.startswith("mine/") for f in files)
    # a strategy, a backend, a benchmark: one module and one yaml each
    assert sorted(Path(f).suffix for f in files) == [".py"] * 3 + [".yaml"] * 3


def test_the_worked_examples_run_as_written(tmp_path):
    for _lang, body in blocks():
        if body.startswith("# file: "):
            path = tmp_path / body.splitlines()[0].removeprefix("# file: ")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    commands = [shlex.split(line) for lang, body in blocks() if lang == "bash" for line in body.splitlines() if line.startswith("madara ")]
    assert len(commands) == 3
    for argv in commands:
        r = cli(*argv[1:], cwd=tmp_path)
        assert r.returncode == 0, (argv, r.stderr)
    cells = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*/*/metrics.json")}
    assert len(cells) == 3
    tiny = next(m for k, m in cells.items() if "__tiny__first_docs__" in k)
    assert tiny["n"] == 3 and tiny["brief"] == "Answer from the first documents only."
    # the included plug-ins key their cells by their source
    assert all(any(s.startswith("plugins.") for s in m["settings"]) for m in cells.values())
    # a range the strategy declares is checked at compose, in one line
    r = cli("--include", "mine", "--config-dir", "mine", "run", "strategy=first_docs", "strategy.n_docs=0", "backend=echo", cwd=tmp_path)
    assert r.returncode == 2 and "strategy.n_docs=0 is out of range: expected an integer >= 1" in r.stderr
