"""The three-agent assessment of a cell (base and CoT; the MADARA paper, Section 4,
Section 5.3 and Appendix N): every document of every example scored by the Relevance
Assessor, the Consistency Verifier and the Conflict Detector, the whole cell in ONE
batched call (stage ``score``, ``score-cot`` or ``score-logprob``), sent agent-major; with
``strategy.conflict=per_query`` the detector's one request per example follows as a
second call. What each agent is asked is :mod:`.requests`, how replies are read
:mod:`.parsing`, the matrix :mod:`.matrix`, the cell's rates :mod:`.polarization`; this
module runs them (:class:`AssessSettings`, :func:`assess`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from madara_cli.agents.matrix import ScoreMatrix, build_matrix
from madara_cli.agents.parsing import reading_parsers
from madara_cli.agents.prompts import AGENTS, CONFLICT
from madara_cli.agents.requests import check_conflict, conflict_request, conflict_stage_name, score_requests, stage_name
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.core.records import ChatRequest, Completion, Example

if TYPE_CHECKING:
    from madara_cli.backends.cache import CachedLLM


@dataclass(frozen=True)
class AssessSettings:
    """Everything an assessment reads besides the examples, the engine and the prompts.

    ``max_tokens`` is one reply's budget; ``parsers`` names each agent's reader
    (:func:`~madara_cli.agents.parsing.reading_parsers`); ``stop`` replaces the default
    stop strings (None keeps them; ``()`` for ``reading.requests=authors``)."""

    cot: bool
    mode: str  # strategy.scoring: generate | logprob
    conflict: str  # strategy.conflict: per_query | per_document
    max_tokens: int
    temperature: float
    seed: int
    parsers: tuple[str, ...] = ("madara",) * len(AGENTS)
    stop: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_conflict(self.conflict)

    @classmethod
    def from_config(
        cls, strategy: Mapping[str, Any], generation: Mapping[str, Any], reading: Mapping[str, Any] | None, *, temperature: float, seed: int,
        cot: bool | None = None, mode: str | None = None, conflict: str | None = None,
    ) -> AssessSettings:
        """The settings of a cell from its config nodes (``cfg.strategy``,
        ``cfg.generation``, ``cfg.reading``). ``cot``, ``mode`` and ``conflict`` default
        to the strategy's ``cot``, ``scoring`` and ``conflict`` (``per_query`` where a
        strategy config has none)."""
        cot = bool(strategy["cot"]) if cot is None else cot
        mode = str(strategy["scoring"]) if mode is None else mode
        conflict = str(strategy.get("conflict", "per_query")) if conflict is None else conflict
        check_conflict(conflict)
        reading = reading or {}
        if str(reading.get("conflict", "adjustment")) == "score_field":
            conflict = "per_document"  # the authors' detector is asked about each document, like the other two
        max_tokens = int(generation["cot_max_tokens"] if cot else generation["score_max_tokens"])
        return cls(cot=cot, mode=mode, conflict=conflict, max_tokens=max_tokens, temperature=float(temperature), seed=int(seed),
                   parsers=reading_parsers(reading), stop=None if str(reading.get("requests", "madara")) == "madara" else ())


def assess(llm: CachedLLM, examples: Sequence[Example], settings: AssessSettings, prompts: PromptSet | None = None) -> list[ScoreMatrix]:
    """Score every document of every example with the three agents through ``llm``, in
    the words of ``prompts`` (the shipped set by default): ONE batched call per stage
    (with ``settings.conflict="per_query"`` a second one, the detector's, one request
    per example)."""
    s = settings
    agents = AGENTS if s.conflict == "per_document" else tuple(x for x in AGENTS if x != CONFLICT)
    per_example = [score_requests(ex, cot=s.cot, mode=s.mode, max_tokens=s.max_tokens, temperature=s.temperature, seed=s.seed, agents=agents,
                                  prompts=prompts, stop=s.stop) for ex in examples]
    back = _score_agent_major(llm, stage_name(s.cot, s.mode), s.mode, per_example, len(agents))
    stop_sent = any(r.stop for reqs in per_example for r in reqs if isinstance(r, ChatRequest))
    if s.conflict == "per_document":
        return [build_matrix(ex, comps, s.mode, parsers=s.parsers, stop_sent=stop_sent) for ex, comps in zip(examples, back)]
    reply_of = _ask_detector(llm, examples, s, prompts)
    return [
        build_matrix(ex, comps, s.mode, reply_of.get(e, Completion(text="")), parsers=s.parsers, stop_sent=stop_sent)
        for e, (ex, comps) in enumerate(zip(examples, back))
    ]


def _score_agent_major(llm: CachedLLM, stage: str, mode: str, per_example: list[list[Any]], a: int) -> list[list[Completion | None]]:
    """Send every example's document-major requests in one call, agent-major (every
    relevance request of the cell, then every consistency request, ...: consecutive
    prompts share the agent's system prompt, which a sequential engine such as llama.cpp
    reuses from its KV cache; cache keys do not depend on position), and return the
    completions in each example's order."""
    order = [(e, n) for j in range(a) for e, reqs in enumerate(per_example) for n in range(j, len(reqs), a)]
    flat = [per_example[e][n] for e, n in order]
    outs = (llm.logprobs if mode == "logprob" else llm.chat)(stage, flat) if flat else []
    back: list[list[Completion | None]] = [[None] * len(reqs) for reqs in per_example]
    for (e, n), c in zip(order, outs):
        back[e][n] = c
    return back


def _ask_detector(llm: CachedLLM, examples: Sequence[Example], s: AssessSettings, prompts: PromptSet | None) -> dict[int, Completion]:
    """The per-query detector's reply for each example that has documents (by index);
    examples without documents have nothing to adjust and ask nothing."""
    asked = [e for e, ex in enumerate(examples) if ex.docs]
    detector = [conflict_request(examples[e], examples[e].docs, cot=s.cot, mode=s.mode, max_tokens=s.max_tokens, temperature=s.temperature,
                                 seed=s.seed, prompts=prompts) for e in asked]
    replies = llm.chat(conflict_stage_name(s.cot, s.mode), detector) if asked else []
    return dict(zip(asked, replies))
