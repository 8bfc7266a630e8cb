"""The score matrix: one example's m documents x three agents, assembled from the
agents' replies (:mod:`madara_cli.agents.parsing`), and the imputation of its
failures for selection."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np

from madara_cli.agents.parsing import NEUTRAL, ParsedScore, read_conflict_reply, read_reply
from madara_cli.agents.prompts import AGENTS, CONFLICT
from madara_cli.core.records import Completion, Example

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class ScoreMatrix:
    """One example's assessment: m documents (rows, retrieval order) x A agents.

    ``scores`` is on the 0-5 scale with NaN where ``failed``; ``raw`` holds each
    agent's reply (for logprob mode, the candidates' log-probabilities as JSON);
    ``reasoning`` and ``confidence`` are filled by CoT scoring.
    """

    example_id: str
    doc_ids: tuple[str, ...]
    agents: tuple[str, ...]
    scores: np.ndarray  # (m, A) float
    failed: np.ndarray  # (m, A) bool
    failure_reasons: tuple[tuple[str | None, ...], ...]
    raw: tuple[tuple[str, ...], ...]
    reasoning: tuple[tuple[tuple[str, ...], ...], ...] = ()
    confidence: tuple[tuple[int | None, ...], ...] = ()
    hit_max_tokens: int = 0  # replies cut by the token limit
    conflict_calls: str = "per_document"  # how the detector column was asked (strategy.conflict)
    missing_ids: int = 0  # per_query: documents the detector's reply gave no adjustment
    extra_ids: int = 0  # per_query: numbers in the reply that name no document

    @property
    def m(self) -> int:
        return self.scores.shape[0]

    def imputed(self) -> np.ndarray:
        """Scores with each failure replaced by the example's mean for that agent
        (:data:`NEUTRAL` when the agent failed on every document)."""
        return impute(self.scores)

    def to_json(self, digits: int = 3) -> list[list[float | None]]:
        return [[None if math.isnan(v) else round(float(v), digits) for v in row] for row in self.scores]


def impute(scores: np.ndarray) -> np.ndarray:
    """Replace NaN by the mean of the finite entries of the same column (agent), or
    :data:`NEUTRAL` for a column without any."""
    s = np.array(scores, dtype=float, copy=True)
    if s.ndim == 1:
        s = s[:, None]
    for j in range(s.shape[1]):
        col = s[:, j]
        bad = ~np.isfinite(col)
        if bad.any():
            good = col[~bad]
            col[bad] = good.mean() if good.size else NEUTRAL
    return s


def ragged(flat: Sequence[T], lengths: Iterable[int]) -> list[list[T]]:
    """``flat`` cut into consecutive rows of ``lengths``: a batched stage's replies back per example."""
    rest = iter(flat)
    return [list(islice(rest, n)) for n in lengths]


def build_matrix(
    example: Example, completions: Sequence[Completion], mode: str, conflict_reply: Completion | None = None, parsers: Sequence[str] | None = None,
    stop_sent: bool = True,
) -> ScoreMatrix:
    """Assemble one example's matrix from its document-major completions: over all
    three agents, or -- with ``conflict_reply``, the per-query detector's one reply --
    over the first two, the detector's column read from that reply. ``parsers`` names
    each agent's reader (``madara`` or ``authors``; all ``madara`` by default);
    ``stop_sent``: whether the agents' requests sent a stop string (:func:`read_reply`)."""
    docs = example.docs or ()
    m, a = len(docs), len(AGENTS)
    per_doc = a if conflict_reply is None else a - 1
    cells = [[(ParsedScore(math.nan), "")] * a for _ in range(m)]  # (reading, raw reply) per document x agent
    cut = 0
    for n, c in enumerate(completions):
        i, j = divmod(n, per_doc)
        cells[i][j] = read_reply(c, AGENTS[j], mode, parsers[j] if parsers else "madara", stop_sent)
        cut += c.finish_reason == "length"
    missing = extra = 0
    if conflict_reply is not None:
        adj, text = read_conflict_reply(conflict_reply, m, mode)
        j = AGENTS.index(CONFLICT)
        for i, parsed in enumerate(adj.values):  # every document's adjustment comes from the one reply
            cells[i][j] = (replace(parsed, reasoning=adj.reasoning, confidence=adj.confidence), text)
        missing, extra = adj.missing_ids, adj.extra_ids
        cut += conflict_reply.finish_reason == "length"

    def grid(read: Callable[[ParsedScore, str], Any]) -> tuple[tuple[Any, ...], ...]:
        return tuple(tuple(read(p, r) for p, r in row) for row in cells)

    return ScoreMatrix(
        example_id=example.id, doc_ids=tuple(d.id for d in docs), agents=AGENTS,
        scores=np.array(grid(lambda p, _: p.value), dtype=float).reshape(m, a),
        failed=np.array(grid(lambda p, _: p.failure is not None), dtype=bool).reshape(m, a),
        failure_reasons=grid(lambda p, _: p.failure), raw=grid(lambda _, r: r), reasoning=grid(lambda p, _: p.reasoning),
        confidence=grid(lambda p, _: p.confidence), hit_max_tokens=cut,
        conflict_calls="per_document" if conflict_reply is None else "per_query", missing_ids=missing, extra_ids=extra,
    )
