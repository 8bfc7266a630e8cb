"""``madara prepare``, ``index build``, ``cache merge`` and ``prompts import-reference``: an engine's
weights made ready, retrieval indexes built, cluster workers' cache shards folded, the authors' prompts imported."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from madara_cli.commands.options import UserError, err, out


def prepare(
    overrides: Optional[List[str]] = typer.Argument(None, help="Hydra overrides naming the engine, e.g. backend=vllm model=smollm2-135m"),
) -> None:
    """Make ready what a run's engine loads, without starting it (vLLM: the model folder made once from the embedded GGUF)."""
    from madara_cli.backends import prepare_backend
    from madara_cli.composition import compose

    cfg = compose(list(overrides or []))
    out.print(prepare_backend(cfg, say=lambda m: err.print(m, style="dim", markup=False, highlight=False)), markup=False, highlight=False)


index_app = typer.Typer(help="Retrieval indexes.", no_args_is_help=True)


@index_app.command("build")
def index_build(
    corpus: Path = typer.Option(..., "--corpus", help="JSONL corpus: id + title/text, or FlashRAG's contents"),
    out_dir: Path = typer.Option(Path("results/indexes"), "--out", help="Parent folder of the index"),
    engine: Optional[str] = typer.Option(None, "--engine", help="bm25s | dense | pyserini (Lucene); same as retriever=NAME"),
    overrides: Optional[List[str]] = typer.Argument(None, help="retriever=bm25s|dense|pyserini and its settings, e.g. retriever.k1=0.9"),
) -> None:
    """Build (or find) a saved index of CORPUS; use it with retriever.index=DIR."""
    from madara_cli.composition import compose
    from madara_cli.retrievers.saved_index import build_index

    cfg = compose(([f"retriever={engine}"] if engine else []) + list(overrides or []))
    path = build_index(corpus, out_dir, cfg.retriever, progress=True)
    out.print(f"index ready: {path}\nuse it with: retriever={cfg.retriever.name} retriever.index={path}")


cache_app = typer.Typer(help="The response cache.", no_args_is_help=True)


@cache_app.command("merge")
def cache_merge(
    cache: Path = typer.Option(Path("results/cache.sqlite"), "--cache", help="The cache; its shards are in CACHE-shards/"),
    keep: bool = typer.Option(False, "--keep", help="Keep the shards after merging"),
) -> None:
    """Fold the per-worker cache shards of cluster jobs into the cache (idempotent)."""
    from madara_cli.backends.shards import merge_shards, shard_dir

    if not cache.is_file() and not shard_dir(cache).is_dir():  # a typo would otherwise "merge 0 shards" and succeed
        raise UserError(f"no response cache {cache} and no shards in {shard_dir(cache)}: nothing to merge "
                        "(pass --cache RESULTS/cache.sqlite of the sweep)")
    r = merge_shards(cache, keep=keep)
    out.print(f"merged {r.shards} shards from {shard_dir(cache)}: {r.rows} entries, {r.added} new to {cache}", markup=False, highlight=False)
    if r.skipped:
        err.print(f"skipped {r.skipped} entries this madara cannot read (cut, or written by a newer madara): not copied; "
                  f"their shards are kept: {', '.join(r.kept)}", markup=False, highlight=False, soft_wrap=True)
    if r.failed:
        raise UserError("shards not merged (kept): " + "; ".join(r.failed))


prompts_app = typer.Typer(help="Prompt sets.", no_args_is_help=True)


@prompts_app.command("import-reference")
def prompts_import_reference(
    checkout: Path = typer.Argument(..., help="Your own checkout of the authors' reference code (github js-lee-AI/MADARA)"),
    out_dir: Path = typer.Option(Path("~/.config/madara"), "--out", help="Config folder to write prompts/authors/ into (use it with --config-dir)"),
) -> None:
    """Make the prompt set ``authors`` from the authors' repository, which madara does not
    ship: their assessor, generator and re-score prompts and the shapes of their user turns."""
    from madara_cli.config.reference_prompts import write_reference_set
    from madara_cli.core.errors import ConfigError

    try:
        folder = write_reference_set(checkout, out_dir)
    except ConfigError as e:
        raise UserError(str(e)) from None
    out.print(f"wrote {folder}; run with: madara --config-dir {folder.parent.parent} run prompts=authors reading=authors ...", markup=False)
