"""Test doubles and helpers that many test modules share.

- :class:`FakeBackend`: a deterministic engine (hash-drawn JSON scores, answers picked
  from the documents) that runs every strategy in :data:`FAKE_STRATEGIES` through the
  real cache, runner and configs, in milliseconds and without a model.
- :func:`madara`: the ``madara`` command as a user types it, in a child process.
- :func:`madara_main`: the same entry point in this process (``sys.argv`` set,
  ``SystemExit`` caught), for tests that monkeypatch what it reaches.
- :func:`one_line_error`: the check that a failure is one clear line, no traceback.

The fixtures that go with them (``no_engine``, ``shared_data``, ``results_dir``) are in
``tests/conftest.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from madara_cli.records import ChatRequest, Completion, ScoreRequest
from tests.conftest import ROOT

# cross_encoder needs model weights; tests/test_strategies_e2e.py exercises it separately.
FAKE_STRATEGIES = [
    "nf", "three_agent", "cot", "sda", "sda_cot", "atf", "rrf",
    "pde", "pde_uniform", "pde_random", "self_consistency", "main_rag",
]


def _h(*parts: object) -> int:
    return int(hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest(), 16)


class FakeBackend:
    """Deterministic engine: agent replies are JSON scores drawn from a hash of the
    request; generations pick a capitalised word of the documents. With
    ``malformed=True`` about 3 in 7 agent replies are broken (prose, out of range,
    empty) and counted in ``self.broken``."""

    name = "fake"

    def __init__(self, malformed: bool = False):
        self.malformed = malformed
        self.broken = 0
        self.agent_replies = 0
        self.chat_calls = 0
        self.score_calls = 0

    @property
    def fingerprint(self) -> str:
        return "fake-malformed" if self.malformed else "fake"

    @property
    def batch_size(self) -> int:
        return 16

    def _adjustments_reply(self, system: str, user: str, prefix: str, h: int) -> str:
        """The per-query Conflict Detector: one adjustment for every numbered document
        of the user turn; after a prefix (logprob mode) the continuation from document
        1's value, without the closing braces the stop string would remove."""
        n = len(re.findall(r"^\[\d+\] ", user, re.M))
        body = ", ".join(f'"{i + 1}": {(h >> (3 * i)) % 5 - 2}' for i in range(n))
        if prefix:
            return body[len('"1": '):]
        head = ""
        if "reasoning_steps" in system:
            steps = ", ".join(f'"step {i} about {h % 97}"' for i in range(1, 6))
            head = f'"reasoning_steps": [{steps}], "confidence": {1 + h % 5}, '
        return f'{{{head}"has_conflict": {str(h % 2 == 0).lower()}, "majority_position": "x", "doc_adjustments": {{{body}}}}}'

    def _agent_reply(self, system: str, h: int, user: str = "", prefix: str = "") -> str:
        self.agent_replies += 1
        if self.malformed and h % 7 < 3:
            self.broken += 1
            return ["This document looks fine to me.", '{"score": 9}', ""][h % 7]
        if "doc_adjustments" in system:
            return self._adjustments_reply(system, user, prefix, h)
        conflict = "Conflict Detector" in system
        key, value = ("adjustment", h % 5 - 2) if conflict else ("score", h % 6)
        if "reasoning_steps" in system:
            steps = ", ".join(f'"step {i} about {h % 97}"' for i in range(1, 6))
            return f'{{"reasoning_steps": [{steps}], "confidence": {1 + h % 5}, "{key}": {value}}}'
        return f'{{"{key}": {value}'

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out = []
        for r in requests:
            self.chat_calls += 1
            system, user = r.messages[0].content, r.messages[-1].content
            h = _h(system, user, r.seed, r.temperature)
            if "reviewers" in system:
                text = self._agent_reply(system, h, user, r.prefix)
            else:
                words = re.findall(r"\b[A-Z][a-z]{3,}\b", user.split("Question:")[0]) or ["Nothing"]
                text = words[h % len(words)]
            out.append(Completion(text=text, tokens_in=len(user) // 4, tokens_out=len(text) // 4, finish_reason="stop"))
        return out

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        out = []
        for r in requests:
            self.score_calls += 1
            h = _h(r.messages[-1].content, r.prefix)
            lp = {c: -float((h >> (4 * i)) % 7) - 0.25 for i, c in enumerate(r.candidates)}
            out.append(Completion(text="", tokens_in=10, logprobs=lp))
        return out

    def close(self) -> None:
        pass


def madara(*args: str, env: dict | None = None, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m madara_cli.cli ARGS`` in a child process from ``cwd`` (the
    checkout by default), wide enough that tables do not wrap. This checkout comes first
    on the child's ``PYTHONPATH`` and the caller's entries stay after it, so the child
    imports this code and sees the same packages as the tests."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "madara_cli.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **(env or {})},
    )


def madara_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI entry point in process; (exit code, stdout, stderr)."""
    from madara_cli import cli

    monkeypatch.setattr(sys, "argv", ["madara", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    cap = capsys.readouterr()
    return int(e.value.code or 0), cap.out, cap.err


def one_line_error(code: int, err: str, *needles: str) -> str:
    assert code != 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]
