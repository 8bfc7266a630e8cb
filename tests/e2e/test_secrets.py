"""Credentials stay where the user put them (issue: secrets stay secret).

* a password in ``backend.base_url`` authenticates the requests and is found in no file
  of the results folder (sqlite cache included), no printed line and no tracked run;
* resolvers (``${oc.env:...}``) are refused in every config read from a file: a cell's
  ``config.yaml``, a ``--config-dir`` file, a grid; ``backend.api_key_env`` from a file
  names only ``*API_KEY``/``*TOKEN`` variables (the command line may name any);
* a prompt template must lie inside its set's folder after links are resolved, and is
  capped at 1 MiB.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from madara_cli.core.credentials import key_env_problem, redact, resolver_problem, without_userinfo
from madara_cli.core.errors import ConfigError
from tests.conftest import ROOT
from tests.fakes import chat_answer, cli, free_port

PASSWORD = "S3cretPW-9f1c"
TOKEN = "tok-7d2e-never-kept"


def _files_holding(root: Path, *needles: str) -> list[str]:
    """Every file under ``root`` (binary ones included: sqlite, parquet) holding a needle."""
    out = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            out += [f"{p.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return out


def test_redact_removes_the_user_info_of_every_url():
    assert redact("GET http://alice:PW@127.0.0.1:8000/v1/models failed") == "GET http://127.0.0.1:8000/v1/models failed"
    assert redact('{"a": "https://u:p%40ss@h/v1", "b": "http://h/x?mail=a@b"}') == '{"a": "https://h/v1", "b": "http://h/x?mail=a@b"}'
    assert redact("backend.base_url=http://alice:p@ss@h:1/v1") == "backend.base_url=http://h:1/v1"
    assert redact("no url, just a@b") == "no url, just a@b"
    assert without_userinfo("http://alice:PW@[::1]:9/v1?q=1") == "http://[::1]:9/v1?q=1"
    assert without_userinfo("http://h:9/v1") == "http://h:9/v1"


def test_resolvers_and_foreign_key_variables_are_found_in_plain_config_data():
    assert "model.name calls the resolver ${oc.env:...}" in resolver_problem({"model": {"name": "${oc.env:MY_SECRET_TOKEN}"}})
    assert "${oc.decode:...}" in resolver_problem({"overrides": ["x=1", "model.name=${oc.decode:${y}}"]})
    assert resolver_problem({"a": "${model.name}", "b": "$5 {x}"}) is None  # a plain reference runs no resolver
    assert "backend.api_key_env" in resolver_problem({"backend": {"api_key_env": "AWS_SECRET_ACCESS_KEY"}})
    assert "overrides[0]" in resolver_problem({"overrides": ["backend.api_key_env=AWS_SECRET_ACCESS_KEY"]})
    assert resolver_problem({"backend": {"api_key_env": "OPENAI_API_KEY"}, "o": ["backend.api_key_env=HF_TOKEN"]}) is None
    assert key_env_problem("GITHUB_TOKEN") is None and "AWS_SECRET" in key_env_problem("AWS_SECRET")


@pytest.mark.llm  # the client-side tokenizer reads the embedded GGUF's vocabulary
def test_a_results_folder_made_with_a_password_and_a_secret_holds_neither(tmp_path, fake_server):
    seen_auth: list[str] = []

    def answer(body):
        return chat_answer(content="Varn")

    fake_server.responders["/v1/chat/completions"] = answer
    port = fake_server.base_url.split(":")[-1].split("/")[0]
    url = f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1"
    results = tmp_path / "results"
    env = {"MADARA_SECRET_API_KEY": TOKEN}
    extra = ["logger=mlflow"] if _have("mlflow") else []
    r = cli("-v", "run", "backend=openai", f"backend.base_url={url}", "backend.api_key_env=MADARA_SECRET_API_KEY", "strategy=nf",
            "limit=2", f"results_dir={results}", *extra, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # used for the requests: the server was asked with the key the user named
    for _, _, headers, _ in fake_server.requests:
        seen_auth.append(headers.get("Authorization", ""))
    assert seen_auth and all(a for a in seen_auth), seen_auth
    assert any(a == f"Bearer {TOKEN}" or a == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode() for a in seen_auth)
    # ... and kept nowhere: no file (config.yaml, metrics.json, summary.csv/parquet, cache.sqlite, mlruns), no line printed
    assert _files_holding(results, PASSWORD, TOKEN) == []
    assert PASSWORD not in r.stdout + r.stderr and TOKEN not in r.stdout + r.stderr
    (metrics,) = results.glob("adhoc/*/metrics.json")
    assert f"http://127.0.0.1:{port}/v1" in metrics.read_text()  # the server is still named, without its user info


def test_error_lines_never_print_a_urls_password(tmp_path, fake_server, monkeypatch):
    from madara_cli.backends.openai_backend import OpenAIBackend
    from madara_cli.core.errors import BackendError
    from madara_cli.core.records import ChatRequest, messages

    class Words:
        def render(self, msgs):
            return " ".join(m.content for m in msgs)

        def count(self, text):
            return len(text.split())

    fake_server.responders["/v1/chat/completions"] = lambda body: (400, {"error": {"message": "bad request"}}, {})
    port = fake_server.base_url.split(":")[-1].split("/")[0]
    b = OpenAIBackend(base_url=f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1", model="m", tokenizer=Words, retries=0)
    try:
        assert PASSWORD not in b.fingerprint and b.fingerprint.startswith(f"openai:http://127.0.0.1:{port}/v1:")
        with pytest.raises(BackendError) as e:
            b.chat([ChatRequest(messages("s", "u"))])
        assert "HTTP 400" in str(e.value) and PASSWORD not in str(e.value), e.value
    finally:
        b.close()
    with pytest.raises(BackendError) as e:
        OpenAIBackend(base_url=f"http://alice:{PASSWORD}@127.0.0.1:{free_port()}/v1", model="m", tokenizer=Words, retries=0)
    assert "cannot connect to http://127.0.0.1:" in str(e.value) and PASSWORD not in str(e.value)


def test_the_cli_error_line_for_an_unreachable_password_url_holds_no_password(tmp_path):
    url = f"http://alice:{PASSWORD}@127.0.0.1:{free_port()}/v1"
    r = cli("run", "backend=openai", f"backend.base_url={url}", "backend.tokenizer=hf", "strategy=nf", "limit=1",
            f"results_dir={tmp_path / 'r'}", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert PASSWORD not in r.stderr + r.stdout and "cannot connect to http://127.0.0.1:" in r.stderr, r.stderr


# --------------------------------------------------------------------------- #
# Resolvers and api_key_env in configs read from files


def test_a_cell_config_with_a_resolver_is_refused_by_the_python_api(tmp_path, monkeypatch):
    import madara_cli.api as m

    monkeypatch.setenv("MY_SECRET_TOKEN", TOKEN)
    cfg = m.compose(["strategy=nf", "limit=1", f"results_dir={tmp_path}"])

    text = cfg.to_yaml().replace("name: smollm2-135m", "name: ${oc.env:MY_SECRET_TOKEN}", 1)
    assert "${oc.env:MY_SECRET_TOKEN}" in text
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        m.run_cell(config=path)
    assert "model.name calls the resolver ${oc.env:...}" in str(e.value) and TOKEN not in str(e.value)
    assert "\n" not in str(e.value) and not list(tmp_path.glob("*/*/metrics.json"))


def _config_dir(tmp_path: Path, rel: str, text: str) -> Path:
    d = tmp_path / "mine"
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    (d / rel).write_text(text, encoding="utf-8")
    return d


@pytest.mark.parametrize("rel, text, overrides, expect", [
    ("model/leaky.yaml", "defaults: [smollm2-135m]\nname: ${oc.env:MY_SECRET_TOKEN}\n", ["model=leaky"], "name calls the resolver ${oc.env:...}"),
    ("grid/leaky.yaml", "name: leaky\naxes: {strategy: [nf]}\noverrides: ['model.name=${oc.env:MY_SECRET_TOKEN}']\n", ["--grid", "leaky"],
     "overrides[0] calls the resolver"),
    ("backend/aws.yaml", "name: openai\nbase_url: http://127.0.0.1:8000/v1\napi_key_env: AWS_SECRET_ACCESS_KEY\n", ["backend=aws"], "not an API key"),
    ("grid/aws.yaml", "name: aws\naxes: {strategy: [nf]}\noverrides: [backend=openai, backend.api_key_env=AWS_SECRET_ACCESS_KEY]\n",
     ["--grid", "aws"], "not an API key"),
])
def test_config_dir_files_and_grids_may_not_call_resolvers_or_name_foreign_secrets(tmp_path, rel, text, overrides, expect):
    d = _config_dir(tmp_path, rel, text)
    r = cli("--config-dir", str(d), "run", *overrides, "--cfg", "job", env={"MY_SECRET_TOKEN": TOKEN}, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert TOKEN not in r.stdout + r.stderr


def test_the_command_line_may_name_any_key_variable():
    from madara_cli.composition import compose

    cfg = compose(["backend=openai", "backend.api_key_env=AWS_SECRET_ACCESS_KEY"])
    assert cfg.backend.api_key_env == "AWS_SECRET_ACCESS_KEY"


def test_a_yaml_file_with_an_escape_byte_in_a_comment_is_one_line(tmp_path):
    d = _config_dir(tmp_path, "model/esc.yaml", "defaults: [smollm2-135m]\n# a comment \x1b[31m red\nname: esc\n")
    r = cli("--config-dir", str(d), "run", "model=esc", "--cfg", "job", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "esc.yaml" in r.stderr and "\x1b" not in r.stderr, r.stderr


# --------------------------------------------------------------------------- #
# Prompt templates


def _leaky_set(tmp_path: Path) -> Path:
    d = tmp_path / "mine"
    (d / "prompts" / "leak").mkdir(parents=True)
    return d / "prompts" / "leak"


def test_a_template_linked_outside_its_set_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(f"my token is {TOKEN}\n")
    folder = _leaky_set(tmp_path)
    os.symlink(secret, folder / "factoid_system.txt")
    r = cli("--config-dir", str(folder.parent.parent), "run", "prompts=leak", "--cfg", "job", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "outside its prompt set's folder" in r.stderr and TOKEN not in r.stdout + r.stderr, r.stderr


def test_a_template_linked_inside_its_set_is_read(tmp_path):
    from madara_cli.config.prompt_sets import load_prompt_set

    folder = _leaky_set(tmp_path)
    (folder / ".words").write_text("Answer with one word.\n")  # a hidden file is no template of the set
    os.symlink(folder / ".words", folder / "factoid_system.txt")
    loaded = load_prompt_set("leak", [folder.parent.parent, ROOT / "configs"])
    assert loaded.templates["factoid_system"].text == "Answer with one word."


def test_a_template_over_one_mib_is_refused_unread(tmp_path):
    from madara_cli.config.prompt_sets import load_prompt_set

    folder = _leaky_set(tmp_path)
    (folder / "factoid_system.txt").write_text("x" * ((1 << 20) + 1))
    with pytest.raises(ConfigError) as e:
        load_prompt_set("leak", [folder.parent.parent, ROOT / "configs"])
    assert "over its limit of 1024 KiB" in str(e.value)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
