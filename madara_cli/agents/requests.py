"""The requests the three agents are asked: one per (document, agent), the per-query
detector's one per example, and the RSC probe's re-scores (the MADARA paper, Section 4,
Appendix F.1 and Appendix N).

Requests depend only on the example, its documents, the agent, CoT, the scoring mode,
the lengths, the temperature and the seed -- never on the strategy -- so 3-Agent, SDA,
ATF, RRF and PDE read the same cached base scores, CoT and SDA+CoT the same CoT scores;
the RSC probe shares them by building its requests with :func:`agent_request`.

``strategy.conflict``: ``per_query`` (the default, Appendix N) asks the detector once per
query about every document (2 m + 1 calls per query, 21 for the top-10; Table 18's note
says ~19), ``per_document`` like the other agents (3 m). In ``logprob`` mode one
next-token distribution holds one document's value, so the detector's request is
generated greedily with the reply begun at document 1's slot (:data:`DETECTOR_PREFIX`).

``strategy.scoring``: ``generate`` (JSON at the model's temperature, read by
:func:`~madara_cli.agents.parsing.parse_completion`) or ``logprob`` (the expectation
sum_i p_i * i over "0".."5" after ``{"score": ``, renormalised over the candidates:
:func:`~madara_cli.agents.parsing.expected_score`; CoT has no logprob variant).
"""

from __future__ import annotations

import json
from typing import Sequence

from madara_cli.agents.prompts import AGENTS, DOC_ADJUSTMENTS, assessor_messages, detector_messages, forced_rescore_messages
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import Scoring
from madara_cli.core.records import ChatRequest, Doc, Example, ScoreRequest
from madara_cli.core.vocabulary import conflict_stage_name, stage_name  # noqa: F401  (the stages these requests go under)

DIGITS: tuple[str, ...] = ("0", "1", "2", "3", "4", "5")
LOGPROB_PREFIX = '{"score": '
SCORING_MODES = tuple(Scoring.__members__)  # generate, logprob (strategy.scoring, rsc.rescoring)
# Base scoring stops at the first "}": {"score": N} is complete there, and a chatty
# model's explanation after it would cost tokens on every one of the 3 m calls per
# query. Engines drop the stop string, so read_reply puts the brace back before parsing.
# CoT replies are not stopped: a model that writes its steps as objects
# ([{"step": 1, ...}]) would be cut before its score.
SCORE_STOP: tuple[str, ...] = ("}",)
CONFLICT_CALLS = ("per_query", "per_document")  # strategy.conflict
# The per-query reply holds one '"10": -2, ' (about 7 tokens) per document on top of
# what a one-document reply needs.
ADJUSTMENT_TOKENS_PER_DOC = 8
DETECTOR_PREFIX = '{"' + DOC_ADJUSTMENTS + '": {"1": '  # logprob mode: the reply starts at document 1's slot


def _check_mode(mode: str, cot: bool) -> None:
    from madara_cli.core.errors import ConfigError  # a user-fixable setting: one line, exit 2

    if mode not in SCORING_MODES:
        raise ConfigError(f"unknown strategy.scoring '{mode}'; valid: {', '.join(SCORING_MODES)}")
    if mode == "logprob" and cot:
        raise ConfigError("strategy.scoring=logprob has no CoT variant (the reasoning must be generated); use scoring=generate with cot=true")


def agent_request(
    example: Example, docs: Sequence[Doc], index: int, agent: str, *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int,
    prompts: PromptSet | None = None, stop: tuple[str, ...] | None = None,
) -> ChatRequest | ScoreRequest:
    """The one request of ``agent`` assessing ``docs[index]`` (``prompts``: the shipped set by
    default). Whatever shares cached scores with the strategies (the RSC probe's normal CoT
    scores) builds its requests here."""
    _check_mode(mode, cot)
    if mode == "logprob":
        return ScoreRequest(messages=assessor_messages(example, docs, index, agent, logprob=True, prompts=prompts), candidates=DIGITS, prefix=LOGPROB_PREFIX)
    return ChatRequest(messages=assessor_messages(example, docs, index, agent, cot=cot, prompts=prompts), max_tokens=max_tokens, temperature=temperature,
                       seed=seed, stop=stop if stop is not None else (() if cot else SCORE_STOP))  # reading.requests=authors: () (no stop)


def score_requests(
    example: Example, *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int, agents: Sequence[str] = AGENTS,
    prompts: PromptSet | None = None, stop: tuple[str, ...] | None = None,
) -> list[ChatRequest | ScoreRequest]:
    """The per-document requests of one example, document-major: (doc 0, agent 0),
    (doc 0, agent 1), ... over ``agents`` (all three unless the detector is asked per query).
    ``stop`` replaces the default stop strings (None: :func:`agent_request`'s own)."""
    _check_mode(mode, cot)
    docs = example.docs or ()
    return [
        agent_request(example, docs, i, agent, cot=cot, mode=mode, max_tokens=max_tokens, temperature=temperature, seed=seed, prompts=prompts, stop=stop)
        for i in range(len(docs))
        for agent in agents
    ]


def conflict_request(
    example: Example, docs: Sequence[Doc], *, cot: bool, mode: str, max_tokens: int, temperature: float, seed: int, prompts: PromptSet | None = None
) -> ChatRequest:
    """The Conflict Detector's one request for a query (``strategy.conflict=per_query``),
    over every document of ``docs``; ``max_tokens`` is the one-document budget, to which
    :data:`ADJUSTMENT_TOKENS_PER_DOC` per document is added."""
    _check_mode(mode, cot)
    budget = int(max_tokens) + ADJUSTMENT_TOKENS_PER_DOC * len(docs)
    if mode == "logprob":
        return ChatRequest(messages=detector_messages(example, docs, prompts=prompts), max_tokens=budget, temperature=0.0, seed=seed, stop=("}",), prefix=DETECTOR_PREFIX)
    return ChatRequest(messages=detector_messages(example, docs, cot=cot, prompts=prompts), max_tokens=budget, temperature=temperature, seed=seed)


def rescore_request(normal: ChatRequest, steps: Sequence[str], *, mode: str, max_tokens: int, confidence: int | None = None) -> ChatRequest | ScoreRequest:
    """The RSC probe's re-score under ``rsc.rescore=prefix`` (Appendix F.1: the perturbed
    chain "is presented as-is to the scoring prompt"; the default is
    :func:`forced_rescore_request`): the ``normal`` CoT request itself with the assistant
    turn begun by the perturbed chain where the model wrote its own, so the perturbation
    is the one thing that differs. ``generate``: the model continues (confidence, score)
    to the closing brace (:func:`read_rescore`); ``logprob``: the prefix runs on to
    ``"score": `` with the model's own confidence kept (omitted when it gave none)."""
    chain = json.dumps([str(s) for s in steps], ensure_ascii=False)
    head = '{"reasoning_steps": ' + chain + ", "
    if mode == "generate":
        return ChatRequest(messages=normal.messages, max_tokens=max_tokens, temperature=normal.temperature, top_p=normal.top_p, seed=normal.seed,
                           stop=SCORE_STOP, prefix=head + '"confidence": ')
    if mode == "logprob":
        conf = "" if confidence is None else f'"confidence": {int(confidence)}, '
        return ScoreRequest(messages=normal.messages, candidates=DIGITS, prefix=head + conf + '"score": ')
    raise ValueError(f"unknown rescoring mode '{mode}'; valid: {', '.join(SCORING_MODES)}")


def forced_rescore_request(
    example: Example, doc: Doc, steps: Sequence[str], *, mode: str, max_tokens: int, temperature: float, seed: int,
    prompts: PromptSet | None = None, shape: str = "madara",
) -> ChatRequest | ScoreRequest:
    """The RSC probe's re-score under ``rsc.rescore=forced`` (the authors' reading of F.1):
    a request of its own whose user turn carries the perturbed chain as a delimited
    previous analysis (:func:`~madara_cli.agents.prompts.forced_rescore_messages`, which
    ``shape`` also words); the reply is ``{"score": N, "confidence": C}``. ``generate``:
    sampled like the normal CoT request, stopped at the closing brace -- except with
    ``shape="authors"`` (``reading.requests=authors``): the authors send no stop string,
    and their parser reads a reply whose brace an engine dropped with it as 0.
    ``logprob``: the expected digit after ``{"score": `` (the reply's first field)."""
    msgs = forced_rescore_messages(example, doc, steps, prompts=prompts, shape=shape)
    if mode == "generate":
        return ChatRequest(messages=msgs, max_tokens=max_tokens, temperature=temperature, seed=seed,
                           stop=() if shape == "authors" else SCORE_STOP)
    if mode == "logprob":
        return ScoreRequest(messages=msgs, candidates=DIGITS, prefix=LOGPROB_PREFIX)
    raise ValueError(f"unknown rescoring mode '{mode}'; valid: {', '.join(SCORING_MODES)}")


def check_conflict(conflict: str) -> None:
    from madara_cli.core.errors import ConfigError

    if conflict not in CONFLICT_CALLS:
        raise ConfigError(f"unknown strategy.conflict '{conflict}'; valid: {', '.join(CONFLICT_CALLS)}")
