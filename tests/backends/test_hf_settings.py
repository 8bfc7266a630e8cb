"""``backend=hf`` without running a model: its settings, their checks, and its identity
(the fingerprint, and what its keys hold through the one identity room: weights and
adapter by content, the hub commit, the resolved dtype and device), and that the
backend lives in its own modules."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from madara_cli.backends import backend_fingerprint
from madara_cli.composition import compose
from madara_cli.config.identity import identify, identify_probe
from madara_cli.core.errors import BackendError
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.plugins.catalog import CATALOG
from tests.fakes import cli, one_line_error

ROOT = Path(__file__).resolve().parents[2]
OWN = {"madara_cli.backends.hf", "madara_cli.backends.hf_engine", "madara_cli.bench.hf_bench"}


def model_folder(path: Path, weights: bytes = b"w" * 64) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "model.safetensors").write_bytes(weights)
    return path


def adapter_folder(path: Path, weights: bytes = b"a" * 32) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


def hf(*extra: str):
    return compose(["backend=hf", "model=smollm2-135m", *extra])


def test_the_backend_is_registered_with_its_schema_and_declarations():
    spec = CATALOG.get("backend", "hf")
    assert spec.package == "transformers"
    assert spec.model_settings == ("hf_source",)
    assert set(spec.runtime_only) == {"batch_size", "micro_batch", "device_map", "n_threads"}
    assert spec.worker_threads == "n_threads" and spec.resolves is not None and spec.loads_hub is not None
    cfg = hf()
    assert cfg.backend.device == "auto" and cfg.backend.dtype is None and cfg.backend.micro_batch == 16


def test_nothing_outside_its_own_modules_imports_them():
    """The backend is a plug-in: its modules and configs/backend/hf.yaml; no other module of
    the package imports it (load_builtin finds it, the bench finds its section)."""
    offenders = []
    for path in sorted((ROOT / "madara_cli").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module in OWN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.ImportFrom) and node.module in ("madara_cli.backends", "madara_cli.bench"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            offenders += [f"{module} imports {n}" for n in names if n in OWN]
    assert offenders == []


def test_a_setting_it_lacks_and_a_bad_value_are_one_line(tmp_path):
    r = cli("run", "backend=hf", "backend.n_ctx=5", "limit=1", f"results_dir={tmp_path}")
    one_line_error(r.returncode, r.stderr, "backend.n_ctx does not apply to backend hf", "micro_batch")
    for bad, needle in (("backend.device=tpu", "use auto, cpu, cuda, cuda:N or mps"), ("backend.dtype=int8", "use one of float32, bfloat16, float16"),
                        ("backend.device=cuda:x", "cuda:N"), ("backend.micro_batch=0", "at least 1")):
        r = cli("plan", "--grid", "demo", "backend=hf", bad, f"results_dir={tmp_path}")
        assert r.returncode == 2, (bad, r.stdout, r.stderr)
        one_line_error(r.returncode, r.stderr, needle)
    r = cli("run", "backend=hf", "backend.device_map=auto", "backend.device=cpu", "limit=1", f"results_dir={tmp_path}")
    one_line_error(r.returncode, r.stderr, "leave backend.device at auto")


@pytest.mark.llm  # fingerprints the embedded model's GGUF file
def test_dtype_follows_the_device_kind_and_is_in_the_identity():
    cpu = hf("backend.device=cpu")
    assert identify(cpu).fragments.resolved == {"dtype": "float32", "device": "cpu"}
    gpu = hf("backend.device=cuda")  # computed without a GPU: nothing is loaded
    assert identify(gpu).fragments.resolved == {"dtype": "bfloat16", "device": "cuda"}
    # the key holds what the settings resolve to, in their place
    assert {k: identify(gpu).payload["backend"][k] for k in ("dtype", "device")} == {"dtype": "bfloat16", "device": "cuda"}
    # and the settings a cell records (metrics.json, summary.csv) say so: device=auto is
    # shown as what it ran on, not as "auto" and a dtype of null
    auto_on_gpu = hf("backend.device=cuda", "backend.dtype=null")
    shown = identify(auto_on_gpu).settings(auto_on_gpu)
    assert (shown["backend.device"], shown["backend.dtype"]) == ("cuda", "bfloat16")
    shown = identify(hf()).settings(hf())
    assert (shown["backend.device"], shown["backend.dtype"]) == ("cpu", "float32")
    # auto and null on this CPU machine are the same cell as cpu and float32 said outright
    assert cell_from_cfg(hf()).key == cell_from_cfg(cpu).key == cell_from_cfg(hf("backend.device=cpu", "backend.dtype=float32")).key
    assert ":bfloat16:cuda:" in backend_fingerprint(gpu) and ":float32:cpu:" in backend_fingerprint(cpu)
    assert backend_fingerprint(hf("backend.device=cuda", "backend.dtype=float32")) != backend_fingerprint(gpu)
    assert cell_from_cfg(gpu).key != cell_from_cfg(cpu).key


@pytest.mark.llm  # fingerprints the embedded model's GGUF file
def test_the_fingerprint_names_the_weights_engine_releases_and_chat_settings():
    from madara_cli.backends.base import installed_version

    fp = backend_fingerprint(hf("backend.device=cpu"))
    assert fp.startswith("hf:HuggingFaceTB/SmolLM2-135M-Instruct@gguf:sha256:")  # the weights by their content, not their file name
    assert f":transformers-{installed_version('transformers')}:torch-{installed_version('torch')}:" in fp
    assert ":len4096:" in fp and backend_fingerprint(hf("backend.device=cpu", "model.max_model_len=2048")) != fp
    assert backend_fingerprint(hf("backend.device=cpu", "model.system_role=false")).endswith(":chat-nosys")


def test_a_local_folder_is_keyed_by_its_files_not_its_path(tmp_path):
    a = model_folder(tmp_path / "a")
    b = model_folder(tmp_path / "b")  # the same files elsewhere
    cfg_a, cfg_b = hf(f"model.hf_source={a}", "backend.device=cpu"), hf(f"model.hf_source={b}", "backend.device=cpu")
    assert backend_fingerprint(cfg_a) == backend_fingerprint(cfg_b)
    assert identify(cfg_a).fragments.inputs == identify(cfg_b).fragments.inputs
    assert cell_from_cfg(cfg_a).config_hash == cell_from_cfg(cfg_b).config_hash
    key = cell_from_cfg(cfg_a).key
    (a / "model.safetensors").write_bytes(b"x" * 64)  # retrained in place: same path, same size
    assert backend_fingerprint(cfg_a) != backend_fingerprint(cfg_b)
    assert cell_from_cfg(cfg_a).key != key


@pytest.mark.llm  # fingerprints the embedded model's GGUF file
def test_an_adapter_is_keyed_by_its_content(tmp_path):
    ad = adapter_folder(tmp_path / "lora")
    base = hf("backend.device=cpu")
    with_adapter = hf("backend.device=cpu", f"backend.adapter={ad}")
    fp = backend_fingerprint(with_adapter)
    assert fp != backend_fingerprint(base) and ":adapter:" in fp and ":peft-" in fp
    assert identify(with_adapter).fragments.inputs["backend.adapter"].startswith("sha256:")
    key = cell_from_cfg(with_adapter).key
    (ad / "adapter_model.safetensors").write_bytes(b"b" * 32)
    assert backend_fingerprint(with_adapter) != fp and cell_from_cfg(with_adapter).key != key
    with pytest.raises(BackendError, match="no adapter_config.json"):
        backend_fingerprint(hf(f"backend.adapter={tmp_path}"))


@pytest.mark.llm  # fingerprints the embedded model's GGUF file
def test_speed_settings_keep_the_key_and_the_probe_key_holds_the_adapter_and_device(tmp_path):
    cfg = hf("backend.device=cpu")
    fast = hf("backend.device=cpu", "backend.micro_batch=64", "backend.batch_size=1024", "backend.n_threads=1")
    assert cell_from_cfg(cfg).key == cell_from_cfg(fast).key
    assert identify_probe(cfg).probe.config_hash == identify_probe(fast).probe.config_hash
    ad = adapter_folder(tmp_path / "lora")
    assert identify_probe(hf("backend.device=cpu", f"backend.adapter={ad}")).probe.config_hash != identify_probe(cfg).probe.config_hash
    assert identify_probe(hf("backend.device=cuda")).probe.config_hash != identify_probe(cfg).probe.config_hash


def test_other_backends_keys_do_not_move():
    """Resolved settings are the hf backend's alone: llama.cpp cells keep their keys."""
    cfg = compose(["model=smollm2-135m"])
    assert identify(cfg).fragments.resolved == {}
    assert "device" not in identify(cfg).payload["backend"]


@pytest.mark.llm  # fingerprints the embedded model's GGUF file
def test_without_torch_the_run_says_what_to_install(tmp_path):
    import subprocess

    from tests.fakes import spawn

    # torch cannot be found (a finder that refuses it), as on a machine without it
    prelude = ("import sys\nclass NoTorch:\n    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] == 'torch': raise ModuleNotFoundError(name)\nsys.meta_path.insert(0, NoTorch())")
    p = spawn("run", "backend=hf", "strategy=nf", "limit=1", f"results_dir={tmp_path}", prelude=prelude,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=300)
    one_line_error(p.returncode, err, "backend=hf needs torch and transformers: pip install")


@pytest.mark.llm
@pytest.mark.parametrize("verb", ["run", "plan"])
def test_a_broken_torch_is_one_line_that_says_what_to_do(tmp_path, verb):
    """A torch that is installed but cannot load (a CUDA build without its libraries) said
    only "libcudart.so.12: cannot open shared object file"."""
    import subprocess

    from tests.fakes import spawn

    prelude = ("import sys, importlib.util\nclass Broken:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        return importlib.util.spec_from_loader(name, self) if name == 'torch' else None\n"
               "    def create_module(self, spec):\n        return None\n"
               "    def exec_module(self, module):\n"
               "        raise OSError('libcudart.so.12: cannot open shared object file: No such file or directory')\n"
               "sys.meta_path.insert(0, Broken())")
    p = spawn(verb, "backend=hf", "strategy=nf", "limit=1", f"results_dir={tmp_path}", prelude=prelude,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=300)
    one_line_error(p.returncode, err, "backend=hf: an installed package cannot be loaded (libcudart.so.12", "reinstall it",
                   "pip install --force-reinstall torch")


def test_a_hub_model_is_keyed_by_the_commit_its_revision_names(tmp_path, monkeypatch):
    cfg = hf("model.hf_source=hub", "backend.device=cpu")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert "@hub@main:" in backend_fingerprint(cfg)  # not downloaded yet: the revision as configured
    ref = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    ref.write_text("a" * 40)
    assert f"@hub@{'a' * 40}:" in backend_fingerprint(cfg)
    assert identify(cfg).fragments.hub_commit == "a" * 40 and identify(cfg).payload["model"]["revision"] == "a" * 40


def test_the_hf_extra_installs_what_the_backend_asks_for(monkeypatch, tmp_path):
    """pip install 'madara[hf]' holds every module backend=hf and the embedded model's folder
    import, and 'madara[peft]' the adapter's; a missing one names the extra to install."""
    import re

    from madara_cli.backends import hf as hf_backend

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {extra: {re.split(r"[<>=!~ \[]", req, maxsplit=1)[0] for req in reqs} for extra, reqs in extras.items()}
    assert names["hf"] == {"torch", "transformers", "gguf", "accelerate"} and names["peft"] == {"peft"}
    monkeypatch.setattr(hf_backend, "_have", lambda module: module not in ("torch", "gguf", "peft"))
    with pytest.raises(BackendError, match=re.escape("pip install 'madara[hf]'")):
        CATALOG.get("backend", "hf").build(hf())
    monkeypatch.setattr(hf_backend, "_have", lambda module: module != "peft")
    with pytest.raises(BackendError, match=re.escape("pip install 'madara[peft]'")):
        CATALOG.get("backend", "hf").build(hf(f"backend.adapter={adapter_folder(tmp_path / 'lora')}"))
    for text in ((ROOT / "docs" / "hf.md").read_text(encoding="utf-8"), (ROOT / "README.md").read_text(encoding="utf-8"),
                 (ROOT / ".ci" / "run").read_text(encoding="utf-8")):
        assert "madara[hf]" in text or ".[hf,peft]" in text
