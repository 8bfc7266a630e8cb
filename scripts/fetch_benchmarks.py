"""Download benchmarks on a machine that reaches the Hugging Face hub, as local JSONL
files for ``benchmark.path=FILE`` on one that does not.

    python scripts/fetch_benchmarks.py --out data/ triviaqa fever musique conflictqa
    # then, offline:
    madara run benchmark=triviaqa benchmark.path=data/triviaqa.jsonl benchmark.corpus=...

Each name is a config in ``configs/benchmark/``; its hub source (``hf_id``,
``hf_config``, ``split``; override with ``--set hf_config=...``) is read through the
same loader code as a run, and the raw rows are written unchanged, so the file
reads back through the same loader. CONFLICTS (Cattan et al. 2025) is on GitHub,
not the hub: ``--conflicts-url`` tries the raw file URL given (the repository's
layout was not verified from here; if it fails, download conflicts.jsonl from
https://github.com/google-research-datasets/rag_conflicts by hand).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

DEFAULT_CONFLICTS_URL = "https://raw.githubusercontent.com/google-research-datasets/rag_conflicts/main/conflicts.jsonl"


def fetch(name: str, out: Path, sets: list[str]) -> Path:
    from madara_cli.composition import compose
    from madara_cli.composition.plugins import load_plugins
    from madara_cli.data.sources import read_rows

    load_plugins()  # the backends, retrievers and strategies register their schemas
    cfg = compose([f"benchmark={name}", *[f"benchmark.{s}" for s in sets]]).benchmark
    data_files = f"hf://datasets/{cfg.hf_id}/{cfg.hf_config}.json" if cfg.loader == "conflictqa" else None
    rows = read_rows(cfg, data_files=data_files)
    dest = out / f"{name}.jsonl"
    with dest.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="benchmark config names (configs/benchmark/*.yaml)")
    ap.add_argument("--out", type=Path, default=Path("data"))
    ap.add_argument("--set", action="append", default=[], help="benchmark override, e.g. hf_config=conflictQA-popQA-gpt4")
    ap.add_argument("--conflicts-url", default=DEFAULT_CONFLICTS_URL)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names:
        if name == "conflicts":
            dest = args.out / "conflicts.jsonl"
            try:
                urllib.request.urlretrieve(args.conflicts_url, dest)
            except OSError as e:
                print(f"conflicts: cannot download {args.conflicts_url} ({e}); get conflicts.jsonl from the GitHub repository", file=sys.stderr)
                failed += 1
                continue
        else:
            from madara_cli.core.errors import DataError

            try:
                dest = fetch(name, args.out, args.set)
            except DataError as e:
                print(f"{name}: {e}", file=sys.stderr)
                failed += 1
                continue
        n = sum(1 for _ in dest.open(encoding="utf-8"))
        print(f"{name}: {n} rows -> {dest}  (madara run benchmark={name} benchmark.path={dest})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
