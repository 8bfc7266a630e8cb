"""``prompts.jsonl``: a line per distinct request of a cell or probe (digest, stage, messages,
sampling, reply), with the prompt as the engine's chat template lays it out when it renders one."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

PROMPTS = "prompts.jsonl"


def prompt_renderer(backend: Any):
    """The engine's chat-template rendering (llama.cpp renders client-side), if it has one."""
    render = getattr(backend, "_render", None)
    if render is None:
        return None

    def text(messages) -> str | None:
        try:
            return render(messages)
        except Exception:  # noqa: BLE001 - a log line never fails a run
            return None

    return text


def write_prompts(folder: Path, samples: Mapping[str, tuple[str, str, Any, Any]], render=None) -> int:
    """Write ``prompts.jsonl`` from ``samples`` (digest -> (stage, kind, request, completion));
    ``render`` (:func:`prompt_renderer`) adds the templated prompt, before any truncation."""
    with (Path(folder) / PROMPTS).open("w", encoding="utf-8") as f:
        for digest, (stage, kind, request, completion) in samples.items():
            body = asdict(request)
            row = {"digest": digest, "stage": stage, "kind": kind, **body}
            if render is not None:
                row["rendered"] = render(request.messages)
            if completion is not None:
                row["reply"] = completion.text if kind == "chat" else None
                if completion.logprobs is not None:
                    row["logprobs"] = {k: (None if not math.isfinite(v) else v) for k, v in completion.logprobs.items()}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(samples)
