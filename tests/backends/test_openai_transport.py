"""The openai backend's transport and replies against a scripted server: one pooled
client with keep-alive, a wall-clock deadline per attempt, no redirect followed (so no
credential reaches another origin), every reply checked before it becomes a completion
and never cached when it fails, the one-line hints (``/v1``, a server that went away,
token-id prompts on a text-only server, a served model name the server does not list,
an offline hub), and what the server says it is (model id, software, version).

The real servers: llama-cpp-python's in tests/backends/test_openai_backend.py (``llm``),
vLLM's CPU build in tests/backends/test_vllm_served.py (``vllm_engine``)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time

import pytest

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.backends.openai_backend import OpenAIBackend
from madara_cli.core.errors import RESUME_HINT, BackendError
from madara_cli.core.records import ChatRequest, Message, ScoreRequest, messages
from tests.fakes import chat_answer, cli, free_port, one_line_error, posts, score_answer, scripted_server


class WordTokenizer:
    """Client-side tokenizer stand-in: a made-up template, one token per word."""

    def render(self, msgs):
        return "".join(f"<{m.role}> {m.content} " for m in msgs) + "<assistant> "

    def count(self, text):
        return len(text.split())


def make(script, **kw) -> OpenAIBackend:
    kw.setdefault("model", "org/model")
    kw.setdefault("tokenizer", WordTokenizer)
    kw.setdefault("base_url", script.base_url)
    return OpenAIBackend(**kw)


ASK = ChatRequest(messages("s", "u"), max_tokens=8)


# -- the pooled client ----------------------------------------------------------------


def test_requests_share_kept_alive_connections(fake_server):
    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer(content=body["messages"][-1]["content"])
    b = make(fake_server, max_in_flight=4)
    try:
        before = fake_server.connections  # the start-up probes' connections, kept for the requests
        out = b.chat([ChatRequest((Message("user", str(i)),)) for i in range(40)])
    finally:
        b.close()
    assert [c.text for c in out] == [str(i) for i in range(40)]
    assert 1 <= before <= 4 and fake_server.connections <= 4  # at most one per request in flight, for 40 requests and 5 probes
    # Without keep-alive (what the benchmark compares against) every request opens its own.
    fake_server.connections = 0
    b = make(fake_server, max_in_flight=4, keep_alive=False)
    try:
        b.chat([ChatRequest((Message("user", str(i)),)) for i in range(10)])
    finally:
        b.close()
    assert fake_server.connections >= 10


def test_the_fallback_to_httpx_works_where_it_is_installed(fake_server, monkeypatch):
    if importlib.util.find_spec("httpx") is None or importlib.util.find_spec("httpcore") is None:
        pytest.skip("only httpx2 here (the fallback is for Python < 3.11); .venv-vllm has both")
    from madara_cli.backends import http_client

    monkeypatch.setitem(sys.modules, "httpx2", None)  # import httpx2 now fails
    httpx, httpcore = http_client.http_modules()
    assert httpx.__name__ == "httpx" and httpcore.__name__ == "httpcore"
    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer("via httpx")
    b = make(fake_server, timeout_s=1.0, retries=0)
    try:
        assert b.chat([ASK])[0].text == "via httpx"
        fake_server.responders["/v1/chat/completions"] = lambda body: "trickle"
        with pytest.raises(BackendError, match="timed out"):
            b.chat([ASK])
    finally:
        b.close()


# -- a server that cannot turn the run against its user ---------------------------------


@pytest.mark.parametrize("status", [302, 307])  # 302: what urllib followed as a GET, key and all
def test_a_redirect_is_one_line_naming_the_location_and_no_credential_leaves(fake_server, status):
    with scripted_server() as other:
        other.responders["/v1/chat/completions"] = lambda body: chat_answer("from elsewhere")
        elsewhere = f"{other.base_url}/chat/completions"
        fake_server.responders["/v1/chat/completions"] = lambda body: (status, {}, {"Location": elsewhere})
        b = make(fake_server, api_key="sk-secret")
        try:
            with pytest.raises(BackendError) as e:
                b.chat([ASK])
        finally:
            b.close()
        assert other.requests == []  # neither the POST nor the key went there
    line = str(e.value)
    assert "\n" not in line and f"HTTP {status}" in line and elsewhere in line and "backend.base_url" in line
    assert len(posts(fake_server, "/v1/chat/completions")) == 1  # a redirect is not retried


def test_a_server_that_trickles_bytes_is_cut_at_the_deadline(fake_server):
    fake_server.trickle_s = 0.1  # one byte every 0.1 s: each read answers, the reply never ends
    fake_server.responders["/v1/chat/completions"] = lambda body: "trickle"
    b = make(fake_server, timeout_s=1.5, retries=1)
    b._backoff = lambda attempt, retry_after: 0.0
    t0 = time.perf_counter()
    try:
        with pytest.raises(BackendError) as e:
            b.chat([ASK])
    finally:
        b.close()
    took = time.perf_counter() - t0
    assert "timed out" in str(e.value) and "backend.timeout_s=1.5" in str(e.value) and RESUME_HINT in str(e.value)
    assert 2 * 1.5 <= took < 2 * 1.5 + 3  # two attempts of 1.5 s each, wall clock


def test_content_parts_are_joined_into_the_text(fake_server):
    parts = [{"type": "text", "text": "Par"}, {"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "is"}]
    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer(content=parts)
    b = make(fake_server)
    try:
        (c,) = b.chat([ASK])
    finally:
        b.close()
    assert c.text == "Paris" and (c.tokens_in, c.tokens_out) == (11, 2)


def _chat_reply(**choice_fields):
    choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop", **choice_fields}
    return {"choices": [choice], "usage": {"prompt_tokens": 11, "completion_tokens": 2}}


def _with(**top):
    body = _chat_reply()
    body.update(top)
    return body


BAD_CHAT = {
    "content null": _chat_reply(message={"role": "assistant", "content": None}),
    "content a number": _chat_reply(message={"role": "assistant", "content": 42}),
    "content parts without text": _chat_reply(message={"role": "assistant", "content": [{"type": "text", "text": 7}]}),
    "usage counts not numbers": _with(usage={"prompt_tokens": "many", "completion_tokens": 2}),
    "usage counts fractional": _with(usage={"prompt_tokens": 1.5, "completion_tokens": 2}),
    "usage not an object": _with(usage=[1, 2]),
    "no choices": {"choices": []},
    "a list, not an object": [1, 2, 3],
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
    "not JSON": b"<html>oops</html>",
    "finish_reason a number": _chat_reply(finish_reason=3),
}


@pytest.mark.parametrize("case", list(BAD_CHAT))
def test_a_chat_reply_that_fails_its_check_is_one_line_and_never_cached(fake_server, tmp_path, case):
    answers = [(200, BAD_CHAT[case], {}), chat_answer("good")]
    fake_server.responders["/v1/chat/completions"] = lambda body: answers.pop(0)
    cache = ResponseCache(tmp_path / "cache.sqlite")
    b = make(fake_server, retries=0)
    llm = CachedLLM(b, cache)
    try:
        with pytest.raises(BackendError) as e:
            llm.chat("generate", [ASK])
        assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
        assert len(cache) == 0  # nothing of it stored
        (c,) = llm.chat("generate", [ASK])  # asked again, not read back
    finally:
        b.close()
        cache.close()
    assert c.text == "good" and len(posts(fake_server, "/v1/chat/completions")) == 2


def _score_reply(top):
    return {"choices": [{"index": 0, "text": "x", "logprobs": {"tokens": ["x"], "top_logprobs": [top]}}], "usage": {"prompt_tokens": 30}}


BAD_SCORES = {
    "a logprob that is text": json.dumps(_score_reply({"1": "x", "2": -1.0})).encode(),
    "a logprob NaN": json.dumps(_score_reply({"1": math.nan, "2": -1.0})).encode(),  # json.dumps writes NaN, json.loads reads it
    "a logprob above 0": json.dumps(_score_reply({"1": 3.0})).encode(),
    "top_logprobs not a list": json.dumps({"choices": [{"text": "x", "logprobs": {"top_logprobs": {"1": -1.0}}}]}).encode(),
    "chat-style entries without a token": json.dumps({"choices": [{"logprobs": {"content": [{"top_logprobs": [{"logprob": -1}]}]}}]}).encode(),
    "prompt_tokens not a count": json.dumps({**_score_reply({"1": -1.0}), "usage": {"prompt_tokens": "30"}}).encode(),
}


@pytest.mark.parametrize("case", list(BAD_SCORES))
def test_a_score_reply_that_fails_its_check_is_one_line_and_never_cached(fake_server, tmp_path, case):
    answers = [(200, BAD_SCORES[case], {}), score_answer({"1": -0.5, "2": -1.0})]
    fake_server.responders["/v1/completions"] = lambda body: answers.pop(0)
    cache = ResponseCache(tmp_path / "cache.sqlite")
    b = make(fake_server, retries=0)
    llm = CachedLLM(b, cache)
    req = ScoreRequest(messages("rate", "doc"), candidates=("1", "2"), prefix="Score: ")
    try:
        with pytest.raises(BackendError) as e:
            llm.logprobs("score", [req])
        assert "\n" not in str(e.value) and "cannot use" in str(e.value) and "nothing of it was cached" in str(e.value)
        assert len(cache) == 0
        (c,) = llm.logprobs("score", [req])
    finally:
        b.close()
        cache.close()
    assert c.logprobs == {"1": -0.5, "2": -1.0}


def test_an_absent_candidate_logprob_is_minus_infinity_not_an_error(fake_server):
    fake_server.responders["/v1/completions"] = lambda body: score_answer({"1": -0.5, "2": None, "3": -math.inf})
    b = make(fake_server)
    try:
        (c,) = b.next_token_logprobs([ScoreRequest(messages("rate", "doc"), candidates=("1", "2", "3"), prefix="")])
    finally:
        b.close()
    assert c.logprobs == {"1": -0.5, "2": -math.inf, "3": -math.inf}


def test_server_text_reaches_the_terminal_escaped(fake_server):
    fake_server.responders["/v1/chat/completions"] = lambda body: (400, {"error": {"message": "bad \x1b[31mred\x1b[0m request"}}, {})
    b = make(fake_server)
    try:
        with pytest.raises(BackendError) as e:
            b.chat([ASK])
    finally:
        b.close()
    assert "\x1b" not in str(e.value) and "\\x1b[31mred" in str(e.value)


# -- the hints ----------------------------------------------------------------------------


def test_a_base_url_without_v1_says_to_add_it(fake_server):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "org/model"}]}, {})
    root = fake_server.base_url.removesuffix("/v1")
    with pytest.raises(BackendError) as e:
        make(fake_server, base_url=root)
    assert str(e.value) == f"backend.base_url={root} has no /v1: the server answers at {root}/v1 (set backend.base_url={root}/v1)"


def test_a_404_under_a_base_url_without_v1_says_so(fake_server):
    root = fake_server.base_url.removesuffix("/v1")
    b = make(fake_server, base_url=root)  # nothing answers /models here at all: no way to tell at start
    try:
        with pytest.raises(BackendError) as e:
            b.chat([ASK])
    finally:
        b.close()
    assert str(e.value) == (f"POST {root}/chat/completions failed with HTTP 404: Not Found; backend.base_url has no /v1 "
                            f"(OpenAI-compatible servers answer under it: backend.base_url={root}/v1)")


def test_a_server_that_goes_away_mid_run_says_rerun_to_resume():
    with scripted_server() as s:
        s.responders["/v1/chat/completions"] = lambda body: chat_answer("first")
        b = make(s, retries=2)
        b._backoff = lambda attempt, retry_after: 0.0
        assert b.chat([ASK])[0].text == "first"
        # The server stops: its kept-alive connection is cut, nothing listens any more.
        s.responders["/v1/chat/completions"] = lambda body: "reset"
    try:
        with pytest.raises(BackendError) as e:
            b.chat([ChatRequest(messages("s", "again"))])
    finally:
        b.close()
    assert str(e.value).startswith(f"the server at {s.base_url} went away during POST {s.base_url}/chat/completions (connection refused)")
    assert str(e.value).endswith(RESUME_HINT)


# llama-cpp-python's server validates `prompt` as text: one error per token, as a 500
# (0.3.36) or a FastAPI 422.
REFUSALS = {
    "422": (422, {"detail": [{"loc": ["body", "prompt", i], "msg": "Input should be a valid string", "type": "string_type"} for i in range(123)]}),
    "500": (500, {"error": {"message": "44 validation errors: {'type': 'string_type', 'loc': ('body', 'prompt', 'str'), "
                                       "'msg': 'Input should be a valid string', 'input': [1, 9690, 198]}", "type": "internal_server_error"}}),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_token_id_prompts_refused_by_a_text_only_server_are_one_line(fake_server, refusal):
    class ControlAware(WordTokenizer):
        def holds_control(self, texts):
            return any("<|im_start|>" in t for t in texts)

        def token_ids(self, msgs, prefix=""):
            return list(range(len(self.render(msgs).split()) + 1))

    status, payload = REFUSALS[refusal]
    fake_server.responders["/v1/completions"] = lambda body: (status, payload, {})
    b = make(fake_server, tokenizer=ControlAware, retries=3)
    try:
        with pytest.raises(BackendError) as e:
            b.chat([ChatRequest(messages("s", "a document that spells <|im_start|>system"))])
    finally:
        b.close()
    line = str(e.value)
    assert "\n" not in line and len(line) < 400 and f"refuses prompts given as token ids (HTTP {status})" in line
    assert "vllm serve" in line and "backend=llamacpp" in line and "Input should be" not in line
    assert len(posts(fake_server, "/v1/completions")) == 1  # the same body would be refused again: not retried


def test_a_served_model_name_the_server_does_not_list_exits_2_naming_what_it_serves(fake_server, tmp_path):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "Qwen/Qwen2.5-7B-Instruct"}, {"id": "other\x1b[2J"}]}, {})
    r = cli("run", "backend=openai", f"backend.base_url={fake_server.base_url}", "backend.served_model_name=mistral-7b",
            "strategy=nf", "limit=1", f"results_dir={tmp_path}")
    assert r.returncode == 2, r.stderr
    one_line_error(r.returncode, r.stderr, f"backend.served_model_name='mistral-7b' is not served at {fake_server.base_url}",
                   "it serves: Qwen/Qwen2.5-7B-Instruct, other\\x1b[2J")
    assert posts(fake_server, "/v1/chat/completions") == []


SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # model=smollm2-135m's hf_id: what its requests name


def _served_run(fake_server, tmp_path, *extra):
    return cli("run", "backend=openai", f"backend.base_url={fake_server.base_url}", "strategy=nf", "limit=1",
               f"results_dir={tmp_path}", *extra)


def _listing(*entries):
    return lambda body: (200, {"data": [dict(e) for e in entries]}, {})


def test_a_server_that_serves_another_model_is_refused_naming_it(fake_server, tmp_path):
    """/models listing only gpt-4o-mini ran a SmolLM2 cell with exit 0 and no word: checked
    on every run, not only when backend.served_model_name is set."""
    fake_server.responders["/v1/models"] = _listing({"id": "gpt-4o-mini"})
    r = _served_run(fake_server, tmp_path)
    one_line_error(r.returncode, r.stderr, f"{fake_server.base_url} serves gpt-4o-mini, not '{SMOL}'",
                   "backend.served_model_name=gpt-4o-mini if that is the same model")
    assert r.returncode == 2 and posts(fake_server, "/v1/chat/completions") == []


def test_a_server_listing_several_others_is_warned_about_and_each_reply_model_is_recorded(fake_server, tmp_path):
    """Several models listed, none of them ours: a warning (a gateway may route by name);
    replies that name another model: a warning, and the cell records what answered."""
    fake_server.responders["/v1/models"] = _listing({"id": "a-model"}, {"id": "b-model"})
    fake_server.responders["/v1/chat/completions"] = lambda body: (200, {**chat_answer("Paris")[1], "model": "gpt-4o-mini"}, {})
    r = _served_run(fake_server, tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{fake_server.base_url} lists a-model, b-model, none of them '{SMOL}'" in r.stderr
    assert f"{fake_server.base_url} answered as 'gpt-4o-mini', not '{SMOL}'" in r.stderr
    (metrics,) = tmp_path.glob("adhoc/*/metrics.json")
    engine = json.loads(metrics.read_text())["provenance"]["engine"]
    assert engine["reply_models"] == {"gpt-4o-mini": len(posts(fake_server, "/v1/chat/completions"))}


def test_replies_naming_the_model_are_recorded_without_a_word(fake_server, tmp_path):
    fake_server.responders["/v1/models"] = _listing({"id": SMOL, "max_model_len": 2048})
    fake_server.responders["/v1/chat/completions"] = lambda body: (200, {**chat_answer("Paris")[1], "model": SMOL}, {})
    r = _served_run(fake_server, tmp_path)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    (metrics,) = tmp_path.glob("adhoc/*/metrics.json")
    assert json.loads(metrics.read_text())["provenance"]["engine"]["reply_models"] == {SMOL: 1}


def test_a_server_context_too_small_for_a_reply_is_refused(fake_server, tmp_path):
    """A server reporting max_model_len 8 ran every prompt cut to nothing."""
    fake_server.responders["/v1/models"] = _listing({"id": SMOL, "max_model_len": 8})
    r = _served_run(fake_server, tmp_path)
    one_line_error(r.returncode, r.stderr, "generation.max_tokens=32 leaves no room for a prompt in the 8-token context",
                   f"{fake_server.base_url}/models reports (max_model_len)")
    assert r.returncode == 2 and posts(fake_server, "/v1/chat/completions") == []
    r = _served_run(fake_server, tmp_path, "backend.n_ctx=2048")  # the user's own context wins: the server is not asked
    assert "leaves no room" not in r.stderr


def test_an_offline_hub_tokenizer_is_one_fast_line(fake_server, tmp_path):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 4096}]}, {})
    # A hub that refuses connections and an empty hub cache, whatever this machine can reach.
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "hf")}
    t0 = time.perf_counter()
    r = cli("run", "backend=openai", f"backend.base_url={fake_server.base_url}", "model=qwen2.5-7b", "strategy=nf", "limit=1",
            f"results_dir={tmp_path / 'results'}", env=env)
    took = time.perf_counter() - t0
    one_line_error(r.returncode, r.stderr, "cannot reach the Hugging Face hub for the tokenizer of Qwen/Qwen2.5-7B-Instruct@main",
                   "model.gguf")
    assert r.returncode == 2 and took < 30, took
    assert posts(fake_server, "/v1/chat/completions") == []


# -- what answered -----------------------------------------------------------------------


def test_vllm_reports_its_version_and_model_and_the_fingerprint_names_them(fake_server):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "org/model", "owned_by": "vllm", "max_model_len": 2048}]}, {})
    fake_server.responders["/version"] = lambda body: (200, {"version": "0.32.0"}, {})
    b = make(fake_server)
    b.close()
    assert b.served == {"base_url": fake_server.base_url, "model_id": "org/model", "software": "vllm", "version": "0.32.0"}
    assert b.fingerprint == f"openai:{fake_server.base_url}:org/model:vllm-0.32.0:rs"


def test_llama_server_reports_its_build(fake_server):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "smol.gguf", "owned_by": "llamacpp"}]}, {})
    fake_server.responders["/props"] = lambda body: (200, {"build_info": "b6500-abc123", "total_slots": 1}, {})
    b = make(fake_server, aliases=("/models/smol.gguf",))  # the model's GGUF, as llama.cpp's servers name it
    b.close()
    assert (b.served["software"], b.served["version"], b.served["model_id"]) == ("llama.cpp-server", "b6500-abc123", "smol.gguf")


def test_a_server_that_says_nothing_of_itself_keeps_the_fingerprint(fake_server):
    b = make(fake_server)
    b.close()
    assert b.served == {"base_url": fake_server.base_url, "model_id": None, "software": None, "version": None}
    assert b.fingerprint == f"openai:{fake_server.base_url}:org/model:rs"


def test_the_served_identity_reaches_provenance_and_summary_columns():
    from madara_cli.composition import compose
    from madara_cli.results.provenance import provenance
    from madara_cli.results.summary import served_columns

    class Served:
        served = {"base_url": "http://h:8000/v1", "model_id": "org/model", "software": "vllm", "version": "0.32.0"}

    prov = provenance(compose(["backend=openai"]), "a", "b", engine=Served())
    assert prov["engine"] == {"backend": "openai", "package": "vllm", "version": "0.32.0", "server": Served.served}
    assert served_columns(prov) == {"served_model": "org/model", "server": "vllm 0.32.0"}
    assert served_columns(provenance(compose([]), "a", "b")) == {}
    assert "openai" not in prov["packages"]  # installed beside madara, never imported by it


def test_closing_the_engine_releases_requests_in_flight(fake_server):
    """Ctrl-C closes the engine while requests wait on a slow server: their threads
    must end then, or the process would wait for them at exit (up to the deadline)."""
    import threading

    fake_server.responders["/v1/chat/completions"] = lambda body: chat_answer()
    b = make(fake_server, max_in_flight=2, timeout_s=60, retries=0)
    fake_server.delay = 8.0
    failed: list[BaseException] = []
    caller = threading.Thread(target=lambda: failed.append(pytest.raises(BackendError, b.chat, [ASK, ASK])), daemon=True)
    caller.start()
    deadline = time.monotonic() + 30  # both requests in flight, however loaded the machine
    while fake_server.in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake_server.in_flight == 2
    t0 = time.perf_counter()
    b.close()
    workers = [t for t in threading.enumerate() if t.name.startswith("madara-openai")]
    for t in workers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in workers) and time.perf_counter() - t0 < 5


def test_a_request_that_races_the_close_does_not_connect(fake_server):
    """A request whose thread reaches the transport only after the engine was closed (it
    was between the client's check and the connect) fails at once, opening nothing."""
    from madara_cli.backends.http_client import Failed, PooledClient

    client = PooledClient(max_connections=2)
    client.close()
    before = fake_server.connections
    t0 = time.perf_counter()
    with pytest.raises(Failed, match="closed"):
        client.request("POST", fake_server.base_url + "/chat/completions", b"{}", {}, deadline_s=30)
    # and past the client's own check, at the pool's connect
    from madara_cli.backends.http_client import _Streams, _transport, http_modules

    httpx, httpcore = http_modules()
    streams = _Streams()
    transport = _transport(httpx, httpcore, 2, True, streams)
    streams.close_all()
    with pytest.raises(httpcore.ConnectError, match="closed"):
        transport.handle_request(httpx.Request("GET", fake_server.base_url + "/models"))
    assert fake_server.connections == before and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("reported", ["4096", -1, True, 2.5, None])
def test_a_context_length_that_is_not_a_count_is_not_taken(fake_server, reported):
    fake_server.responders["/v1/models"] = lambda body: (200, {"data": [{"id": "org/model", "max_model_len": reported}]}, {})
    b = make(fake_server, default_n_ctx=1234)
    b.close()
    assert b.n_ctx == 1234
