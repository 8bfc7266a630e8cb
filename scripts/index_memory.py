"""Measure the memory and time of building a bm25s index (the numbers in
madara_cli/retrievers/saved_index.py's docstring).

    python scripts/index_memory.py --corpus ../shared/data/flashrag_sample/wiki_sample_corpus.jsonl --scales 1 20 100

Each scale builds in a fresh process from a corpus of ``scale`` copies of the input
(ids renumbered, one unique token added per copy so the vocabulary grows), and
reports the peak RSS of that process, the peak above its RSS after imports, the
index size on disk and the wall time. Extrapolate linearly from the slope between
the two largest scales.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from omegaconf import OmegaConf
from madara_cli.retrievers.saved_index import build_index
import bm25s, Stemmer  # noqa: F401  (imports count as baseline)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cfg = OmegaConf.create({"name": "bm25s", "k1": 0.9, "b": 0.4, "stemmer": "english", "stopwords": "en"})
t = time.perf_counter()
out = build_index(sys.argv[1], sys.argv[2], cfg, progress=False)
secs = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
size = sum(p.stat().st_size for p in Path(out).iterdir() if p.is_file() and p.name != "corpus.jsonl")
print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024, "index_mb": size / 2**20, "seconds": secs}))
"""


def scaled_corpus(src: Path, scale: int, dst: Path) -> int:
    rows = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    n = 0
    with dst.open("w", encoding="utf-8") as f:
        for c in range(scale):
            for r in rows:
                r = dict(r)
                r["id"] = str(n)
                key = "contents" if "contents" in r else "text"
                r[key] = f"{r[key]} zqx{c}w{n % 997}"
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 20, 100])
    args = ap.parse_args()
    for scale in args.scales:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "corpus.jsonl"
            n = scaled_corpus(args.corpus, scale, corpus)
            r = subprocess.run([sys.executable, "-c", CHILD, str(corpus), str(Path(tmp) / "idx")], capture_output=True, text=True, check=True)
            m = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{n:>9,} passages  peak RSS {m['peak_mb']:8.1f} MB  (+{m['peak_mb'] - m['base_mb']:7.1f} MB over imports)  "
                  f"index {m['index_mb']:7.1f} MB  {m['seconds']:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
