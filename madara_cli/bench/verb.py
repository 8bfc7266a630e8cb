"""``madara bench``: the verb. It sits beside the other verbs (cli.py registers it), not
under them: developer tooling that measures the runner, kept off the runner's stack."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

out = Console(width=None if sys.stdout.isatty() else 160, markup=False)
err = Console(stderr=True, markup=False)


def bench(
    only: str = typer.Option("calls,overhead,scoring,stats,stages", "--only", help="Sections: calls, overhead, scoring, stats, stages, threads, vllm, vllm_cpu (need vLLM: .venv-vllm), openai_pool (llama.cpp's server), plan (the plan's estimate ÷ wall time per strategy), and those the engines' bench modules add (an unknown name lists every one)"),
    limit: int = typer.Option(2, "--limit", min=1, help="calls: queries per cell of the plan (needs no model)"),
    stage_limit: int = typer.Option(1, "--stage-limit", min=1, help="stages: queries per cell"),
    prompts: int = typer.Option(4, "--prompts", min=1, help="overhead: prompts"),
    questions: int = typer.Option(1, "--questions", min=1, help="scoring: questions"),
    docs: int = typer.Option(4, "--docs", min=1, help="scoring: documents per question (3 agents each)"),
    n_threads: Optional[int] = typer.Option(1, "--threads", min=1, help="llama.cpp threads for the model sections"),
    out_dir: Path = typer.Option(Path("results/bench"), "--out", help="Where the JSON files go"),
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides, e.g. model=qwen3-0.6b"),
) -> None:
    """Measure, side by side in one run: call economy, orchestration overhead, scoring cost, statistics, stage times."""
    from madara_cli.bench import BenchOptions, run_bench, summary_rows

    opts = BenchOptions(limit=limit, stage_limit=stage_limit, prompts=prompts, score_questions=questions, score_docs=docs, n_threads=n_threads,
                        overrides=list(overrides or []), out_dir=out_dir)
    results = run_bench(opts, tuple(x for x in only.split(",") if x), say=lambda m: err.print(m, style="dim"))
    t = Table(title="madara bench (ratios measured side by side in one run)")
    for col in ("section", "measure", "ratio"):
        t.add_column(col, justify="right" if col == "ratio" else "left")
    for row in summary_rows(results):
        t.add_row(*row)
    out.print(t)
    out.print(f"{out_dir}/*.json", style="dim")
