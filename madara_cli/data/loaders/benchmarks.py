"""Loaders of the paper's benchmarks (each a LoaderSpec in the one catalog, listed at the bottom).

Each turns the rows of one source format (from :func:`read_rows`: the hub, or
``benchmark.path``) into :class:`Example` records in source order, with every gold alias,
the dataset's own documents when it ships them, and the meta the analyses need.

* ``mini`` - the offline benchmark :mod:`madara_cli.data.mini` generates.
* ``conflicts`` - CONFLICTS (Cattan et al. 2025, "DRAGged into Conflicts", github
  google-research-datasets/rag_conflicts, 458 queries: the paper's count); GitHub only,
  so it needs ``benchmark.path``.
* ``conflictqa`` - ConflictQA (Xie et al. 2023, HF ``osunlp/ConflictQA``):
  entity-substitution conflicts, popQA and strategyQA parts, one file per generator.
* ``fever``, ``triviaqa``, ``musique`` - the paper's other benchmarks;
  ``popqa``, ``arc_challenge``, ``asqa`` - MAIN-RAG's (ACL 2025).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from madara_cli.config.settings import Node, Settings
from madara_cli.core.errors import DataError
from madara_cli.core.records import Doc, Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.data.sources import read_rows
from madara_cli.plugins import register


def aliases(*values: Any) -> tuple[str, ...]:
    """Flatten strings, lists and JSON-encoded lists into unique non-empty aliases,
    first occurrence first."""
    out: dict[str, None] = {}

    def add(v: Any) -> None:
        if v is None:
            return
        if isinstance(v, (list, tuple)):
            for x in v:
                add(x)
            return
        s = str(v).strip()
        if s.startswith("[") and s.endswith("]"):
            try:
                add(json.loads(s))
                return
            except json.JSONDecodeError:
                pass
        if s:
            out.setdefault(s, None)

    for v in values:
        add(v)
    return tuple(out)


def _require(rows: list[dict], fields: Iterable[str], cfg: Settings, hint: str) -> None:
    missing = [f for f in fields if f not in rows[0]] if rows else []
    if missing:
        raise DataError(f"benchmark {cfg.name}: rows lack field(s) {', '.join(missing)}; expected {hint}")


def load_mini(cfg: Settings) -> list[Example]:
    from madara_cli.data.mini import generate

    return generate(n_questions=cfg.n_questions, seed=0)


# -- CONFLICTS (Cattan et al. 2025)

CONFLICTS_TEXT_FIELDS = ("short_text", "snippet", "response_str")
CONFLICTS_MAX_WORDS = 400  # response_str can be a whole web page


def load_conflicts(cfg: Settings) -> list[Example]:
    """CONFLICTS rows ``{question, correct_answer, conflict_type, source, search_results:
    [{title, url, snippet, date, response_str, short_text}]}`` (5-20 results): each result
    a document (``short_text``, else ``snippet``, else the first 400 words of
    ``response_str``; the date, which freshness conflicts turn on, in the title); the
    category in ``meta["conflict_type"]``. Most "Conflicting opinions" and "Complementary
    information" rows lack ``correct_answer`` and are dropped unless
    ``benchmark.require_answers=false``."""
    if not cfg.get("path"):
        raise DataError("benchmark conflicts (Cattan et al. 2025) is on GitHub, not the Hugging Face hub: download conflicts.jsonl "
                        "from https://github.com/google-research-datasets/rag_conflicts and pass benchmark.path=FILE")
    rows = read_rows(cfg)
    _require(rows, ("question", "search_results"), cfg, "CONFLICTS rows {question, correct_answer, conflict_type, search_results}")
    examples = []
    for i, row in enumerate(rows):
        qid = f"{cfg.name}-{i:04d}"
        docs = []
        for j, r in enumerate(row.get("search_results") or []):
            first = next((v for v in (" ".join(str(r.get(f) or "").split()) for f in CONFLICTS_TEXT_FIELDS) if v), "")
            text = " ".join(first.split(" ")[:CONFLICTS_MAX_WORDS]) if first else ""
            if not text:
                continue
            title = str(r.get("title") or "").strip()
            date = str(r.get("date") or "").strip()
            if date and date.lower() not in ("na", "n/a", "none", "null", "unknown"):
                title = f"{title} ({date})" if title else f"({date})"
            docs.append(Doc(id=f"{qid}-d{j:02d}", text=text, title=title, meta={"url": r.get("url") or "", "date": date}))
        examples.append(Example(id=qid, question=str(row["question"]).strip(), answers=aliases(row.get("correct_answer")), docs=tuple(docs),
                                task="factoid", meta={"conflict_type": row.get("conflict_type") or "", "source": row.get("source") or ""}))
    return examples


# -- ConflictQA (Xie et al. 2023)

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


def load_conflictqa(cfg: Settings) -> list[Example]:
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
    _require(rows, ("question", "ground_truth", "parametric_memory_aligned_evidence", "counter_memory_aligned_evidence"), cfg,
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


def _conflictqa_evidence_rows(rows: list[dict], cfg: Settings) -> list[Example]:
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


# -- FEVER

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


def load_fever(cfg: Settings) -> list[Example]:
    """FEVER claims as ``task="fever"`` examples, the label the answer (SUPPORTS / REFUTES;
    NOT ENOUGH INFO dropped, as in the paper's binary task), from the official jsonl (``id,
    label, claim, evidence``), HF ``fever/fever`` (a row per evidence sentence, merged by
    id), KILT (``input, output``) or FlashRAG (``question, golden_answers``); gold pages in
    ``meta["evidence_pages"]``. No passages: documents come from ``benchmark.corpus`` (or a
    pyserini index)."""
    rows = read_rows(cfg)
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


# -- TriviaQA, PopQA (open-domain factoid QA over a corpus)


def load_triviaqa(cfg: Settings) -> list[Example]:
    """TriviaQA with every alias: HF ``mandarjoshi/trivia_qa`` (``answer.aliases``,
    ``normalized_aliases``, ``value``), the open-domain jsonl of the shared slice
    (``answers``) and FlashRAG (``golden_answers``). No passages: documents come
    from ``benchmark.corpus``."""
    rows = read_rows(cfg)
    examples = []
    for n, row in enumerate(rows):
        if not row.get("question"):
            raise DataError(f"benchmark {cfg.name}: row {n} has no question")
        ans = row.get("answer")
        if isinstance(ans, dict):
            answers = aliases(ans.get("value"), ans.get("aliases"), ans.get("normalized_value"), ans.get("normalized_aliases"))
        else:
            answers = aliases(row.get("answers"), row.get("golden_answers"), ans)
        key = row.get("question_id") if row.get("id") is None else row.get("id")
        examples.append(Example(id=f"{cfg.name}-{key if key is not None else n}", question=str(row["question"]).strip(), answers=answers))
    return examples


def load_popqa(cfg: Settings) -> list[Example]:
    """PopQA (``akariasai/PopQA``): ``question`` and ``possible_answers`` (a JSON
    string on the hub); subject popularity and relation in meta."""
    rows = read_rows(cfg)
    _require(rows, ("question", "possible_answers"), cfg, "PopQA rows (id, question, possible_answers, s_pop, prop)")
    return [Example(id=f"{cfg.name}-{row.get('id', n)}", question=str(row["question"]).strip(), answers=aliases(row["possible_answers"]),
                    meta={"s_pop": row.get("s_pop"), "prop": row.get("prop")}) for n, row in enumerate(rows)]


# -- MuSiQue (20 own paragraphs per question)

_HOPS = re.compile(r"^(\d+)hop")


def load_musique(cfg: Settings) -> list[Example]:
    """MuSiQue-Ans: each question with its 20 paragraphs as documents (``<qid>-p<idx>``),
    ``meta["supporting"]`` those marked ``is_supporting``, ``meta["hops"]`` from the id
    prefix (``2hop__``, ``3hop1__``, ``4hop3__`` -> 2, 3, 4); unanswerable ones (MuSiQue-Full)
    dropped. ``benchmark.candidates=all`` (the default here, Section 6.5's "20 mixed
    supporting/distractor paragraphs per query") keeps all 20, ``retrieved`` the top k."""
    rows = read_rows(cfg)
    _require(rows, ("id", "question", "paragraphs", "answer"), cfg, "MuSiQue rows (id, question, paragraphs, answer, answer_aliases)")
    examples = []
    for row in rows:
        if row.get("answerable") is False:
            continue
        qid = str(row["id"])
        docs = tuple(Doc(id=f"{qid}-p{p.get('idx', j)}", title=str(p.get("title") or ""), text=" ".join(str(p.get("paragraph_text") or "").split()),
                         meta={"is_supporting": bool(p.get("is_supporting"))}) for j, p in enumerate(row["paragraphs"]))
        m = _HOPS.match(qid)
        examples.append(Example(id=qid, question=str(row["question"]).strip(), answers=aliases(row.get("answer"), row.get("answer_aliases")),
                                docs=docs, meta={"supporting": [d.id for d in docs if d.meta["is_supporting"]], "hops": int(m.group(1)) if m else None}))
    return examples


# -- ARC-Challenge, ASQA (MAIN-RAG)


def load_arc(cfg: Settings) -> list[Example]:
    """ARC-Challenge (``allenai/ai2_arc``): the question with its lettered choices;
    the gold answers are the answer key and the choice's text. Retrieval uses the
    bare question (``meta["query"]``)."""
    rows = read_rows(cfg)
    _require(rows, ("question", "choices", "answerKey"), cfg, "ARC rows (id, question, choices{text,label}, answerKey)")
    examples = []
    for n, row in enumerate(rows):
        choices = row["choices"] or {}
        labels, texts = list(choices.get("label") or []), list(choices.get("text") or [])
        key = str(row["answerKey"]).strip()
        options = "\n".join(f"{lab}: {txt}" for lab, txt in zip(labels, texts, strict=False))
        gold = texts[labels.index(key)] if key in labels else None
        examples.append(Example(id=f"{cfg.name}-{row.get('id', n)}", question=f"{str(row['question']).strip()}\n{options}", answers=aliases(key, gold),
                                meta={"query": str(row["question"]).strip(), "choices": dict(zip(labels, texts, strict=False))}))
    return examples


def load_asqa(cfg: Settings) -> list[Example]:
    """ASQA (``din0s/asqa``): the ambiguous question; answers = every short answer of
    its disambiguated QA pairs (``meta["qa_pairs"]`` keeps them per pair for
    MAIN-RAG's str-em, ``meta["long_answers"]`` the references)."""
    rows = read_rows(cfg)
    _require(rows, ("ambiguous_question", "qa_pairs"), cfg, "ASQA rows (sample_id, ambiguous_question, qa_pairs, annotations)")
    examples = []
    for n, row in enumerate(rows):
        pairs = [{"question": p.get("question", ""), "short_answers": list(aliases(p.get("short_answers")))} for p in row["qa_pairs"] or []]
        examples.append(Example(id=f"{cfg.name}-{row.get('sample_id', n)}", question=str(row["ambiguous_question"]).strip(),
                                answers=aliases([p["short_answers"] for p in pairs]),
                                meta={"qa_pairs": pairs, "long_answers": [a.get("long_answer", "") for a in row.get("annotations") or []]}))
    return examples


def _mini_key(benchmark: Node) -> str:
    return f"mini:n{benchmark.n_questions}"  # the generator's size names its rows


SPECS = [register(LoaderSpec(name="mini", load=load_mini, description="the offline mini benchmark madara generates itself (no download)",
                             key=_mini_key, offline="generated here"))]
SPECS += [register(LoaderSpec(name=name, load=load, description=text)) for name, load, text in (
    ("conflicts", load_conflicts, "CONFLICTS (Cattan et al. 2025): 458 queries with conflicting search results"),
    ("conflictqa", load_conflictqa, "ConflictQA (Xie et al. 2023): entity-substituted evidence"),
    ("fever", load_fever, "FEVER: claim verification (SUPPORTS / REFUTES)"),
    ("triviaqa", load_triviaqa, "TriviaQA: open-domain factoid questions"),
    ("popqa", load_popqa, "PopQA: long-tail entity questions"),
    ("musique", load_musique, "MuSiQue: multi-hop questions over 20 paragraphs"),
    ("arc_challenge", load_arc, "ARC-Challenge: grade-school science, multiple choice"),
    ("asqa", load_asqa, "ASQA: ambiguous factoid questions"),
)]
