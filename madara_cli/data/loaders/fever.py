"""``fever``: FEVER claim verification, the paper's binary task (SUPPORTS / REFUTES)."""

from __future__ import annotations

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, read_checked
from madara_cli.plugins import register

FEVER_LABELS = ("SUPPORTS", "REFUTES")


def _fever_label(row: dict) -> str:
    label = row.get("label")
    if label is None and row.get("output"):  # KILT: output[{answer}]
        label = (row["output"][0] or {}).get("answer")
    if label is None and row.get("golden_answers"):  # FlashRAG
        label = aliases(row["golden_answers"])[0]
    if isinstance(label, int):  # integer-coded class labels
        label = {0: "SUPPORTS", 1: "REFUTES"}.get(label, "NOT ENOUGH INFO")
    return str(label or "").strip().upper()


def _fever_pages(row: dict) -> list[str]:
    pages: dict[str, None] = {}
    ev = row.get("evidence")
    if isinstance(ev, list):  # official: evidence sets of [annotation_id, evidence_id, wiki_page, sentence_id]
        for group in ev:
            for item in group or []:
                if isinstance(item, (list, tuple)) and len(item) >= 3 and item[2]:
                    pages.setdefault(str(item[2]), None)
    if row.get("evidence_wiki_url"):  # HF fever/fever: one row per evidence sentence
        pages.setdefault(str(row["evidence_wiki_url"]), None)
    return list(pages)


def load_fever(cfg: Node) -> list[Example]:
    """FEVER claims as ``task="fever"`` examples, the label the answer (SUPPORTS / REFUTES;
    NOT ENOUGH INFO dropped, as in the paper's binary task), from the official jsonl (``id,
    label, claim, evidence``), HF ``fever/fever`` (a row per evidence sentence, merged by
    id), KILT (``input, output``) or FlashRAG (``question, golden_answers``); gold pages in
    ``meta["evidence_pages"]``. No passages: documents come from ``benchmark.corpus`` (or a
    pyserini index)."""
    rows = read_checked(cfg)
    merged: dict[str, dict] = {}
    for n, row in enumerate(rows):
        claim = row.get("claim") or row.get("input") or row.get("question")
        if not claim:
            raise DataError(f"benchmark {cfg.name}: row {n} has no claim (expected fields id, label, claim)")
        label = _fever_label(row)
        if label not in FEVER_LABELS:
            continue
        key = str(row.get("id", n))
        entry = merged.setdefault(key, {"claim": str(claim).strip(), "label": label, "pages": {}})
        for p in _fever_pages(row):
            entry["pages"].setdefault(p, None)
    return [Example(id=f"{cfg.name}-{key}", question=e["claim"], answers=(e["label"],), docs=None, task="fever",
                    meta={"evidence_pages": list(e["pages"])}) for key, e in merged.items()]


SPEC = register(LoaderSpec(name="fever", load=load_fever, description="FEVER: claim verification (SUPPORTS / REFUTES)"))
