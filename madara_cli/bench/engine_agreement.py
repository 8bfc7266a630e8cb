"""What the engine sections of ``madara bench`` share: one real stage's requests, a timer, and
an engine's agreement with llama.cpp (the GGUF itself) on the same requests at temperature 0
-- the logprob scores' digit distributions (top digit equal, mean absolute difference of the
expected score), the JSON scores (parse rates, equal values) and the answers (after clean-up)."""

from __future__ import annotations

import math
import time
from typing import Any


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def examples(cfg, n: int):
    """The first ``n`` queries of ``cfg``'s cell, through the one walk (``prepare_cell``)."""

    from madara_cli.experiment.walk import prepare_cell

    return prepare_cell(cfg.merged({"limit": n}), None, force=True).examples  # type: ignore[union-attr]


def stage_requests(cfg, n_questions: int, mode: str, temperature: float | None = None, max_tokens: int | None = None):
    """The examples of the first ``n_questions`` questions and the three agents' score
    requests over their documents (``mode``: ``generate`` for JSON, ``logprob``)."""
    from madara_cli.agents.requests import score_requests

    exs = examples(cfg, n_questions)
    temp = float(cfg.model.temperature) if temperature is None else temperature
    tokens = int(cfg.generation.score_max_tokens) if max_tokens is None else max_tokens
    kw = dict(cot=False, mode=mode, max_tokens=tokens, temperature=temp, seed=int(cfg.seed))
    return exs, [r for ex in exs for r in score_requests(ex, **kw)]


def llamacpp_cfg(cfg):
    """llama.cpp on the model, benchmark and seed of ``cfg`` (two threads)."""
    from madara_cli.composition import compose

    return compose([f"model={cfg.model.name}", f"benchmark={cfg.benchmark.name}", "backend=llamacpp", "backend.n_threads=2",
                    f"seed={int(cfg.seed)}", f"results_dir={cfg.results_dir}"])


def agreement_with_llamacpp(cfg, n_questions: int, notes: list[str]) -> dict[str, Any]:
    """The engine of ``cfg`` against llama.cpp at temperature 0, on the same requests;
    the keys name the engine by its backend name (``json_parse_rate_<name>``)."""
    from madara_cli.agents.generator import clean_answer, generation_request
    from madara_cli.agents.parsing import expected_score, parse_completion
    from madara_cli.agents.prompts import AGENTS
    from madara_cli.backends import make_backend

    name = str(cfg.backend.name)
    exs, scores = stage_requests(cfg, n_questions, "logprob")
    _, jsons = stage_requests(cfg, n_questions, "generate", temperature=0.0)
    answers = [generation_request(ex, ex.docs, int(cfg.generation.max_tokens), 0.0, int(cfg.seed)) for ex in exs]
    got: dict[str, dict[str, list]] = {}
    for engine, engine_cfg in (("llamacpp", llamacpp_cfg(cfg)), (name, cfg)):
        backend = make_backend(engine_cfg)
        try:
            got[engine] = {"scores": backend.next_token_logprobs(scores), "json": backend.chat(jsons), "answers": backend.chat(answers)}
        finally:
            backend.close()
    a, b = got["llamacpp"], got[name]
    ea, eb = ([expected_score(c.logprobs, r.candidates) for c, r in zip(g["scores"], scores)] for g in (a, b))

    def top(c) -> str | None:
        finite = {k: v for k, v in (c.logprobs or {}).items() if v is not None and math.isfinite(v)}
        return max(finite, key=finite.get) if finite else None

    both = [(x, y) for x, y in zip(ea, eb) if not (math.isnan(x) or math.isnan(y))]
    pa, pb = ([parse_completion(c, AGENTS[i % len(AGENTS)], "generate") for i, c in enumerate(g["json"])] for g in (a, b))
    ans_a, ans_b = ([clean_answer(c.text, str(cfg.benchmark.task)) for c in g["answers"]] for g in (a, b))
    return {
        "questions": len(exs), "score_requests": len(scores), "json_requests": len(jsons),
        "top_digit_agreement": round(sum(top(x) == top(y) for x, y in zip(a["scores"], b["scores"])) / len(scores), 3),
        "expected_score_mean_abs_diff": round(sum(abs(x - y) for x, y in both) / len(both), 3) if both else None,
        "expected_score_max_abs_diff": round(max(abs(x - y) for x, y in both), 3) if both else None,
        "json_parse_rate_llamacpp": round(sum(p.ok for p in pa) / len(pa), 3),
        f"json_parse_rate_{name}": round(sum(p.ok for p in pb) / len(pb), 3),
        "json_equal_values": round(sum(x.ok and y.ok and x.value == y.value for x, y in zip(pa, pb)) / len(pa), 3),
        "answers_equal": round(sum(x == y for x, y in zip(ans_a, ans_b)) / len(ans_a), 3),
        "answers": [{"llamacpp": x, name: y} for x, y in zip(ans_a, ans_b)],
        "notes": list(notes),
    }
