"""How closely bm25s (the default retriever) agrees with pyserini's Lucene BM25 on the
same corpus and queries, both with the paper's k1=0.9, b=0.4.

Builds both indexes of CORPUS (``madara index build`` for each engine), searches the
questions of each QUESTIONS file with both, and prints per file: the mean overlap of
the two top-10 sets (|A ∩ B| / 10), how often the top-1 document is the same, and how
often the two top-10 lists are identical. The two differ in analysis only: bm25s uses
the Snowball English stemmer and its English stop-word list, Anserini's default
analyzer Porter stemming and Lucene's English stop words.

Usage (extra: pyserini):
  python scripts/lucene_vs_bm25s.py \\
    --corpus ../shared/data/flashrag_sample/wiki_sample_corpus.jsonl \\
    --questions ../shared/data/flashrag_sample/nq_test.jsonl ../shared/data/triviaqa/triviaqa_test_shared.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from madara_cli.composition import compose
from madara_cli.retrievers.pyserini import pyserini_searcher
from madara_cli.retrievers.saved_index import BM25sIndex, build_index, index_settings


def questions(path: Path) -> list[str]:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [str(r.get("question") or r.get("claim") or r.get("input")) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--questions", type=Path, nargs="+", required=True)
    ap.add_argument("--indexes", type=Path, default=None, help="Where to build the indexes (default: a temp folder)")
    ap.add_argument("-k", type=int, default=10)
    args = ap.parse_args()
    out = args.indexes or Path(tempfile.mkdtemp(prefix="madara-lucene-vs-bm25s-"))
    from madara_cli.composition.plugins import load_plugins

    load_plugins()  # the backends, retrievers and strategies register their schemas
    bm_cfg = compose(["retriever=bm25s"]).retriever
    lu_cfg = compose(["retriever=pyserini"]).retriever
    bm = BM25sIndex(build_index(args.corpus, out, bm_cfg, progress=False), index_settings(bm_cfg))
    lucene = pyserini_searcher(str(build_index(args.corpus, out, lu_cfg, progress=False)), float(lu_cfg.k1), float(lu_cfg.b))
    k = args.k
    print(f"corpus {args.corpus.name}; k={k}; BM25 k1={bm_cfg.k1} b={bm_cfg.b} (both)")
    print(f"{'questions':<36} {'n':>5} {'overlap@k':>10} {'top-1 same':>11} {'identical top-k':>16}")
    for qfile in args.questions:
        qs = questions(qfile)
        a = [[d.id for d, _ in r] for r in bm.search(qs, k)]
        hits = lucene.batch_search(qs, [str(i) for i in range(len(qs))], k=k, threads=1)
        b = [[h.docid for h in hits.get(str(i), [])] for i in range(len(qs))]
        overlap = sum(len(set(x) & set(y)) / k for x, y in zip(a, b)) / len(qs)
        top1 = sum(bool(x) and bool(y) and x[0] == y[0] for x, y in zip(a, b)) / len(qs)
        same = sum(x == y for x, y in zip(a, b)) / len(qs)
        print(f"{qfile.name:<36} {len(qs):>5} {overlap:>10.3f} {top1:>11.3f} {same:>16.3f}")


if __name__ == "__main__":
    main()
