"""Every ``madara ...`` line the README and the guides in docs/ show parses as the CLI
reads it: the verb exists, its options and arguments are the ones it takes, and the
overrides of a ``run``/``plan``/``probe`` line compose (the first cell of a grid line).
The worked examples that need a run are run by tests/test_docs_commands.py; this test
makes sure no documented command has drifted from the CLI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"```(?:bash|sh|console|shell)?\n(.*?)```", re.S)
_COMMAND = re.compile(r"^(?:\S+=\S+\s+)*(?:\.venv[-\w]*/bin/)?madara(?:\s|$)")


def documented_commands() -> list[tuple[str, str]]:
    """(file, command line) for every madara command in a fenced block: continuation
    lines joined, comments cut, optional ``[...]`` parts kept without their brackets."""
    out = []
    for path in DOCS:
        for block in _FENCE.findall(path.read_text(encoding="utf-8")):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.strip().removeprefix("$ ")
                if not _COMMAND.match(line):
                    continue
                line = re.sub(r"\s+#.*$", "", line)
                line = line.replace("[", "").replace("]", "")
                out.append((path.name, line))
    return out


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20  # the README's ten and the running guide's


def _args(line: str) -> list[str]:
    words = shlex.split(line)
    while "=" in words[0] and not words[0].startswith("madara"):  # VAR=value prefixes
        words.pop(0)
    return words[1:]  # after the program


@pytest.mark.parametrize("doc, line", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_every_documented_command_parses(doc, line, monkeypatch, tmp_path):
    from typer.main import get_command

    from madara_cli.cli import app

    args = _args(line)
    for flag in ("--config-dir", "--include"):
        if flag in args and not (ROOT / args[args.index(flag) + 1]).is_dir():
            pytest.skip(f"{flag} names a folder the example makes first (tests/test_docs_commands.py runs it)")
    group = get_command(app)
    try:
        ctx = group.make_context("madara", list(args), resilient_parsing=False)
        name, sub, rest = group.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        sub_ctx = sub.make_context(name, rest, parent=ctx)
    except Exception as e:  # click's UsageError (typer ships its own copy of click): unknown verb, option, value
        if not hasattr(e, "format_message"):
            raise
        pytest.fail(f"{doc}: `{line}` does not parse: {e.format_message()}")
    if name not in ("run", "plan", "probe"):
        return
    _compose(sub_ctx.params, name, monkeypatch)


def _compose(params: dict, verb: str, monkeypatch) -> None:
    """The line's overrides compose: one cell, or the first cell of its grid."""
    from madara_cli.composition import compose
    from madara_cli.config import load_grid
    from madara_cli.experiment.grid import grid_overrides

    overrides = [o for o in (params.get("overrides") or []) if "=" in o]
    if verb == "probe":  # --model / --benchmark as madara_cli.api.probe reads them: before the overrides, which win
        overrides = [f"{k}={params[k]}" for k in ("model", "benchmark") if params.get(k)] + overrides
    if params.get("multirun") or any("," in o.split("=", 1)[1] for o in overrides if not o.startswith(("+", "~"))):
        overrides = [o.split(",")[0] if "," in o else o for o in overrides]  # a sweep: its first point
    if params.get("grid"):
        cells = grid_overrides(load_grid(params["grid"]), overrides)
        assert cells, params["grid"]
        compose(cells[0])
    else:
        compose(overrides)
