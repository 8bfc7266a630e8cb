"""``conflictqa``: ConflictQA (Xie et al. 2023, HF ``osunlp/ConflictQA``): entity-substitution
conflicts, popQA and strategyQA parts, one file per generator."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from madara_cli.config.settings import Node
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc, Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.loaders.rows import aliases, require
from madara_cli.data.sources import read_rows
from madara_cli.plugins import register

_BOOL_ALIASES = {"true": ("True", "yes"), "false": ("False", "no")}


def _conflictqa_answers(ground_truth: Any) -> tuple[str, ...]:
    """Alias list; strategyQA's ["True"]/["False"] also accept yes/no, the natural
    answer to its yes/no questions."""
    gt = aliases(ground_truth)
    if len(gt) == 1 and gt[0].lower() in _BOOL_ALIASES:
        return _BOOL_ALIASES[gt[0].lower()]
    return gt


def _mentions(text: str, answers: Iterable[str]) -> bool:
    from madara_cli.core.metrics import normalize

    t = f" {normalize(text)} "
    return any(n and f" {n} " in t for n in (normalize(a) for a in answers))


def _relation(target_answer: str, answers: tuple[str, ...]) -> str:
    """supportive when the passage's target answer names a gold alias (the rule
    ConflictQA's own ``ck_relation`` labels follow), conflicting when it does not;
    unknown for yes/no questions, whose target answers are sentences."""
    if not answers or answers[0] in ("True", "False"):
        return "unknown"
    return "supportive" if _mentions(target_answer, answers) else "conflicting"


def load_conflictqa(cfg: Node) -> list[Example]:
    """ConflictQA in either shape (told by the fields): raw (the hub's
    ``conflictQA-<part>-<model>.json``, a row per question: ``question, ground_truth,
    memory_answer, counter_answer, parametric_memory_aligned_evidence,
    counter_memory_aligned_evidence, popularity``), or evidence rows (SABER's popQA slice:
    a row per (question, evidence) with ``raw_idx, ck_text, ck_relation, ground_truth``,
    grouped by question). Documents are the two evidence passages, ``meta["keep_docs"]``
    so retrieval keeps both (filling up to k with BM25 distractors from
    ``benchmark.corpus`` when set); ``meta["supporting"]``/``["conflicting"]`` name those
    that agree / disagree with the gold answer."""
    data_files = None
    if not cfg.get("path"):
        if not cfg.get("hf_id") or not cfg.get("hf_config"):
            raise DataError("benchmark conflictqa needs hf_id and hf_config (e.g. conflictQA-popQA-chatgpt), or benchmark.path=FILE")
        data_files = f"hf://datasets/{cfg.hf_id}/{cfg.hf_config}.json"
    rows = read_rows(cfg, data_files=data_files)
    if rows and "ck_text" in rows[0]:
        return _conflictqa_evidence_rows(rows, cfg)
    require(rows, ("question", "ground_truth", "parametric_memory_aligned_evidence", "counter_memory_aligned_evidence"), cfg,
             "ConflictQA rows (question, ground_truth, memory_answer, counter_answer, *_aligned_evidence) or SABER evidence rows (ck_text)")
    examples = []
    for i, row in enumerate(rows):
        qid = f"{cfg.name}-{i:05d}"
        answers = _conflictqa_answers(row.get("ground_truth"))
        docs = []
        for kind, field, target in (
            ("param", "parametric_memory_aligned_evidence", row.get("memory_answer") or ""),
            ("counter", "counter_memory_aligned_evidence", row.get("counter_answer") or ""),
        ):
            text = " ".join(str(row.get(field) or "").split())
            if text:
                docs.append(Doc(id=f"{qid}-{kind}", text=text, meta={"source_field": field, "target_answer": target, "relation": _relation(target, answers)}))
        examples.append(_conflictqa_example(qid, str(row["question"]).strip(), answers, docs, row.get("popularity")))
    return examples


def _conflictqa_evidence_rows(rows: list[dict], cfg: Node) -> list[Example]:
    groups: dict[Any, list[dict]] = {}
    for row in rows:
        groups.setdefault((row.get("dataset"), row.get("raw_idx"), row["question"]), []).append(row)
    examples = []
    for (_, raw_idx, question), members in groups.items():
        qid = f"{cfg.name}-{int(raw_idx):05d}" if raw_idx is not None else f"{cfg.name}-{len(examples):05d}"
        answers = _conflictqa_answers(members[0].get("ground_truth"))
        docs = []
        for j, r in enumerate(members):
            meta = r.get("metadata") or {}
            field = meta.get("ck_source_field") or ""
            kind = {"parametric_memory_aligned_evidence": "param", "counter_memory_aligned_evidence": "counter"}.get(field, f"e{j}")
            docs.append(Doc(id=f"{qid}-{kind}", text=" ".join(str(r.get("ck_text") or "").split()), meta={
                "source_field": field, "target_answer": r.get("ck_target_answer") or "", "relation": r.get("ck_relation") or "unknown"}))
        popularity = (members[0].get("metadata") or {}).get("popularity")
        examples.append(_conflictqa_example(qid, str(question).strip(), answers, docs, popularity))
    return examples


def _conflictqa_example(qid: str, question: str, answers: tuple[str, ...], docs: list[Doc], popularity: Any) -> Example:
    return Example(id=qid, question=question, answers=answers, docs=tuple(docs), task="factoid", meta={
        "keep_docs": True, "popularity": popularity,
        "supporting": [d.id for d in docs if d.meta.get("relation") == "supportive"],
        "conflicting": [d.id for d in docs if d.meta.get("relation") == "conflicting"],
    })


SPEC = register(LoaderSpec(name="conflictqa", load=load_conflictqa, description="ConflictQA (Xie et al. 2023): entity-substituted evidence"))
