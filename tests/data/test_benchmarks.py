"""Benchmark loaders: the shared data slices read in place through
``benchmark=<name> benchmark.path=<file>``, hand-written fixtures in the hub formats
of the benchmarks with no local slice, the seeded sampling, and the one-line error
when the hub is unreachable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.core.errors import DataError
from madara_cli.core.records import Example
from madara_cli.data import sources
from madara_cli.data.splits import load_all_examples, load_benchmark, split
from tests.conftest import ROOT
from tests.fakes import cli


def examples_of(name: str, path: Path | str, *extra: str) -> list[Example]:
    cfg = compose([f"benchmark={name}", f"benchmark.path={path}", *extra])
    return load_all_examples(cfg.benchmark)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------
# The shared slices


def test_musique_slice(shared_data):
    exs = examples_of("musique", shared_data / "musique" / "musique_ans_migres_shared.jsonl")
    assert len(exs) == 100
    # SOURCES.md: 75 2-hop, 13 3hop1 + 1 3hop2, 8 4hop1 + 3 4hop3
    assert Counter(ex.meta["hops"] for ex in exs) == {2: 75, 3: 14, 4: 11}
    for ex in exs:
        assert ex.answers and ex.answers[0].strip()
        assert len(ex.docs) == 20 and len({d.id for d in ex.docs}) == 20
        ids = {d.id for d in ex.docs}
        assert 2 <= len(ex.meta["supporting"]) <= 4 and set(ex.meta["supporting"]) <= ids
        assert all(d.text and d.title for d in ex.docs)
    first = exs[0]
    assert first.id == "2hop__574419_270105" and first.answers == ("Stanley",)
    assert first.meta["supporting"] == ["2hop__574419_270105-p1", "2hop__574419_270105-p8"]


def test_musique_train_slice_reads_too(shared_data):
    exs = examples_of("musique", shared_data / "musique" / "musique_ans_train_hipporag_shared.jsonl")
    assert len(exs) == 100 and all(len(ex.docs) == 20 and ex.meta["supporting"] for ex in exs)


def test_fever_slice(shared_data):
    exs = examples_of("fever", shared_data / "fever" / "fever_paper_dev_sr_shared.jsonl")
    assert len(exs) == 400
    assert Counter(ex.answers for ex in exs) == {("SUPPORTS",): 194, ("REFUTES",): 206}
    assert all(ex.task == "fever" and ex.docs is None for ex in exs)
    assert exs[0].question == "Fox 2000 Pictures released the film Soul Food."
    assert exs[0].meta["evidence_pages"] == ["Soul_Food_-LRB-film-RRB-"]


def test_triviaqa_slice(shared_data):
    exs = examples_of("triviaqa", shared_data / "triviaqa" / "triviaqa_test_shared.jsonl")
    assert len(exs) == 400 and len({ex.id for ex in exs}) == 400
    assert exs[0].id == "triviaqa-qw_2021" and "Yuri Gagarin" in exs[0].answers
    assert all(ex.answers and ex.docs is None and ex.task == "factoid" for ex in exs)
    assert sum(len(ex.answers) for ex in exs) / len(exs) > 5  # alias lists, not one answer


def test_conflictqa_popqa_slice_groups_evidence_rows(shared_data):
    exs = examples_of("conflictqa", shared_data / "conflicts" / "conflictqa_popqa_llama2-7b_saber_shared.jsonl")
    assert len(exs) == 35  # 70 rows = 35 questions x 2 evidence passages
    for ex in exs:
        assert len(ex.docs) == 2 and ex.meta["keep_docs"]
        assert {d.id.rsplit("-", 1)[1] for d in ex.docs} == {"param", "counter"}
        sup, con = set(ex.meta["supporting"]), set(ex.meta["conflicting"])
        assert not sup & con and sup | con <= {d.id for d in ex.docs}
    george = exs[0]
    assert george.question == "What is George Rankin's occupation?" and "politician" in george.answers
    assert george.meta["supporting"] == ["conflictqa-00000-counter"] and george.meta["conflicting"] == ["conflictqa-00000-param"]


@pytest.mark.parametrize("model", ["chatgpt", "gpt4", "llama2-7b", "qwen7b"])
def test_conflictqa_strategyqa_slices(shared_data, model):
    exs = examples_of("conflictqa-strategyqa", shared_data / "conflicts" / f"conflictqa_strategyqa_{model}_shared.jsonl")
    assert len(exs) == 250
    assert {ex.answers for ex in exs} <= {("True", "yes"), ("False", "no")}
    assert all(len(ex.docs) == 2 and all(d.text for d in ex.docs) for ex in exs)


def test_benchmark_path_is_read_without_the_hub(shared_data, monkeypatch):
    """A local file never consults the hub, even with the probe wired to fail."""
    monkeypatch.setattr(sources, "hub_reachable", lambda *a, **k: pytest.fail("the hub was consulted for a local file"))
    assert len(examples_of("fever", shared_data / "fever" / "fever_paper_dev_sr_shared.jsonl")) == 400


# ---------------------------------------------------------------------------
# Hub formats, from hand-written fixtures


def test_conflicts_cattan_format(tmp_path):
    rows = [
        {
            "source": "freshqa", "question": "Who is the CEO of Twitter?", "conflict_type": "Conflict due to outdated information",
            "correct_answer": "Linda Yaccarino",
            "search_results": [
                {"title": "Twitter CEO", "url": "https://a", "snippet": "Musk is CEO.", "date": "2022-11-01", "response_str": "", "short_text": "Elon Musk is the CEO of Twitter."},
                {"title": "New CEO", "url": "https://b", "snippet": "Yaccarino named CEO.", "date": "NA", "response_str": "long page", "short_text": ""},
                {"title": "Empty", "url": "https://c", "snippet": "", "date": "", "response_str": "", "short_text": ""},
            ],
        },
        {"source": "conflictingqa", "question": "Is coffee good for you?", "conflict_type": "Conflicting opinions and research outcomes", "correct_answer": "", "search_results": [{"title": "t", "snippet": "s"}]},
    ]
    path = write_jsonl(tmp_path / "conflicts.jsonl", rows)
    exs = examples_of("conflicts", path)
    assert len(exs) == 1  # the opinion row has no gold answer
    ex = exs[0]
    assert ex.answers == ("Linda Yaccarino",) and ex.meta["conflict_type"] == "Conflict due to outdated information"
    assert [d.text for d in ex.docs] == ["Elon Musk is the CEO of Twitter.", "Yaccarino named CEO."]
    assert ex.docs[0].title == "Twitter CEO (2022-11-01)" and ex.docs[1].title == "New CEO"
    assert len(examples_of("conflicts", path, "benchmark.require_answers=false")) == 2


def test_conflicts_needs_a_path():
    cfg = compose(["benchmark=conflicts"])
    with pytest.raises(DataError, match="google-research-datasets/rag_conflicts.*benchmark.path=FILE"):
        load_all_examples(cfg.benchmark)


def test_conflictqa_raw_hub_format(tmp_path):
    row = {
        "question": "What is Ada Lovelace's occupation?", "popularity": 5000, "ground_truth": ["mathematician", "maths"],
        "memory_answer": "Ada Lovelace is a mathematician.", "parametric_memory": "...",
        "counter_answer": "Ada Lovelace is a chef.", "counter_memory": "...",
        "parametric_memory_aligned_evidence": "Ada Lovelace was an English mathematician.",
        "counter_memory_aligned_evidence": "Ada Lovelace was a celebrated chef in London.",
    }
    (ex,) = examples_of("conflictqa", write_jsonl(tmp_path / "conflictQA-popQA-gpt4.json", [row]))
    assert ex.answers == ("mathematician", "maths")
    assert ex.meta["supporting"] == [f"{ex.id}-param"] and ex.meta["conflicting"] == [f"{ex.id}-counter"]


def test_fever_hub_rows_merge_and_drop_nei(tmp_path):
    rows = [  # HF fever/fever: one row per evidence sentence
        {"id": 7, "label": "SUPPORTS", "claim": "A is B.", "evidence_annotation_id": 1, "evidence_id": 1, "evidence_wiki_url": "A", "evidence_sentence_id": 0},
        {"id": 7, "label": "SUPPORTS", "claim": "A is B.", "evidence_annotation_id": 2, "evidence_id": 2, "evidence_wiki_url": "B", "evidence_sentence_id": 3},
        {"id": 8, "label": "NOT ENOUGH INFO", "claim": "C is D.", "evidence_annotation_id": 3, "evidence_id": -1, "evidence_wiki_url": "", "evidence_sentence_id": -1},
        {"id": 9, "label": "REFUTES", "claim": "E is F.", "evidence_annotation_id": 4, "evidence_id": 4, "evidence_wiki_url": "E", "evidence_sentence_id": 1},
    ]
    exs = examples_of("fever", write_jsonl(tmp_path / "fever.jsonl", rows))
    assert [(ex.id, ex.answers, ex.meta["evidence_pages"]) for ex in exs] == [
        ("fever-7", ("SUPPORTS",), ["A", "B"]),
        ("fever-9", ("REFUTES",), ["E"]),
    ]


def test_triviaqa_hub_format(tmp_path):
    row = {"question": "Which planet is red?", "question_id": "tc_1", "question_source": "x", "entity_pages": {}, "search_results": {},
           "answer": {"aliases": ["Mars", "Red Planet"], "normalized_aliases": ["mars", "red planet"], "value": "Mars", "normalized_value": "mars"}}
    (ex,) = examples_of("triviaqa", write_jsonl(tmp_path / "tqa.jsonl", [row]))
    assert ex.id == "triviaqa-tc_1" and ex.answers == ("Mars", "Red Planet", "mars", "red planet")


def test_popqa_tsv_as_on_the_hub(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text(
        "id\tsubj\tprop\tobj\ts_pop\tquestion\tpossible_answers\n"
        '4222362\tGeorge Rankin\toccupation\tpolitician\t142\tWhat is George Rankin\'s occupation?\t["politician", "political leader"]\n',
        encoding="utf-8",
    )
    (ex,) = examples_of("popqa", path)
    assert ex.id == "popqa-4222362" and ex.answers == ("politician", "political leader") and ex.meta["s_pop"] == 142


def test_arc_challenge_format(tmp_path):
    row = {"id": "Mercury_1", "question": "Which gas do plants absorb?", "choices": {"text": ["Oxygen", "Carbon dioxide", "Helium"], "label": ["A", "B", "C"]}, "answerKey": "B"}
    (ex,) = examples_of("arc_challenge", write_jsonl(tmp_path / "arc.jsonl", [row]))
    assert ex.answers == ("B", "Carbon dioxide")
    assert ex.question.splitlines() == ["Which gas do plants absorb?", "A: Oxygen", "B: Carbon dioxide", "C: Helium"]
    assert ex.meta["query"] == "Which gas do plants absorb?"


def test_asqa_format(tmp_path):
    row = {
        "sample_id": "-123", "ambiguous_question": "Who won the cup?",
        "qa_pairs": [{"context": "", "question": "Who won in 2010?", "short_answers": ["Spain"], "wikipage": None},
                     {"context": "", "question": "Who won in 2014?", "short_answers": ["Germany", "West Germany"], "wikipage": None}],
        "wikipages": [], "annotations": [{"knowledge": [], "long_answer": "Spain in 2010 and Germany in 2014."}],
    }
    (ex,) = examples_of("asqa", write_jsonl(tmp_path / "asqa.jsonl", [row]))
    assert ex.id == "asqa--123" and ex.answers == ("Spain", "Germany", "West Germany")
    assert [p["short_answers"] for p in ex.meta["qa_pairs"]] == [["Spain"], ["Germany", "West Germany"]]


def test_missing_file_and_wrong_format_are_one_line(tmp_path):
    with pytest.raises(DataError, match="not found"):
        examples_of("triviaqa", tmp_path / "nope.jsonl")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"foo": 1}])
    with pytest.raises(DataError, match="lack field"):
        examples_of("musique", bad)


# ---------------------------------------------------------------------------
# Sampling


def test_split_is_seeded_and_nested_by_default(shared_data):
    path = shared_data / "fever" / "fever_paper_dev_sr_shared.jsonl"
    cfg = compose(["benchmark=fever", f"benchmark.path={path}", "benchmark.sample=200"])
    ev, cal = load_benchmark(cfg.benchmark, seed=0), load_benchmark(cfg.benchmark, seed=0, which="calibration")
    # Paper reading: the calibration queries are the first 100 of the evaluated ones.
    assert (len(ev), len(cal)) == (200, 100) and [e.id for e in cal] == [e.id for e in ev[:100]]
    assert [e.id for e in ev] != [e.id for e in load_benchmark(cfg.benchmark, seed=1)]
    small, _ = split(load_all_examples(cfg.benchmark), 50, 100, seed=0)
    assert [e.id for e in small] == [e.id for e in ev[:50]]  # a smaller sample is a prefix


def test_disjoint_split_holds_calibration_out(shared_data):
    path = shared_data / "fever" / "fever_paper_dev_sr_shared.jsonl"
    nested = compose(["benchmark=fever", f"benchmark.path={path}", "benchmark.sample=200"])
    cfg = compose(["benchmark=fever", f"benchmark.path={path}", "benchmark.sample=200", "benchmark.calibration_split=disjoint"])
    ev, cal = load_benchmark(cfg.benchmark, seed=0), load_benchmark(cfg.benchmark, seed=0, which="calibration")
    assert (len(ev), len(cal)) == (200, 100) and not {e.id for e in ev} & {e.id for e in cal}
    # One probe serves both modes: the calibration split is the same queries.
    assert [e.id for e in cal] == [e.id for e in load_benchmark(nested.benchmark, seed=0, which="calibration")]


def test_conflicts_sized_source_is_evaluated_whole_by_default():
    exs = [Example(id=str(i), question="q", answers=("a",)) for i in range(458)]  # CONFLICTS' size
    ev, cal = split(exs, 1000, 100, seed=0)
    assert (len(ev), len(cal)) == (458, 100) and {e.id for e in cal} <= {e.id for e in ev}
    ev, cal = split(exs, 1000, 100, seed=0, calibration_split="disjoint")
    assert (len(ev), len(cal)) == (358, 100) and not {e.id for e in ev} & {e.id for e in cal}
    ev, cal = split(exs[:60], 1000, 100, seed=0, calibration_split="disjoint")  # smaller than the calibration split
    assert (len(ev), len(cal)) == (60, 0)
    with pytest.raises(DataError, match="valid: nested, disjoint"):
        split(exs, 10, 5, seed=0, calibration_split="overlap")


# ---------------------------------------------------------------------------
# The hub, unreachable

HUB_LINE = (
    "cannot reach the Hugging Face hub for mandarjoshi/trivia_qa and it is not in the local datasets cache; download it elsewhere "
    "and pass benchmark.path=FILE (a warm cache is read offline by itself; HF_HUB_OFFLINE=1 skips the hub check)"
)


def test_unreachable_hub_is_one_line_and_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(sources, "hub_reachable", lambda *a, **k: False)
    t0 = time.perf_counter()
    with pytest.raises(DataError) as e:
        load_benchmark(compose(["benchmark=triviaqa"]).benchmark, seed=0)
    assert str(e.value) == HUB_LINE and time.perf_counter() - t0 < 20  # fails fast, never hangs on the network


def test_hub_probe_gives_up_quickly(monkeypatch):
    for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    t0 = time.perf_counter()
    assert sources.hub_reachable(timeout=1.0) is False
    assert time.perf_counter() - t0 < 20  # fails fast, never hangs on the network


def _offline_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"), "COLUMNS": "200"}


def test_offline_mode_fails_fast_through_datasets(tmp_path):
    """HF_HUB_OFFLINE=1 skips the probe; datasets itself must then fail at once."""
    code = (
        "from madara_cli.composition import compose\nfrom madara_cli.core.errors import DataError\nfrom madara_cli.data.splits import load_benchmark\n"
        "from madara_cli.composition.plugins import load_plugins\nload_plugins()\n"
        "try:\n    load_benchmark(compose(['benchmark=triviaqa']).benchmark, seed=0)\nexcept DataError as e:\n    print(e)\n"
    )
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_offline_env(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == HUB_LINE
    assert time.perf_counter() - t0 < 30


def test_cli_prints_the_hub_error_as_one_line(tmp_path):
    r = cli("run", "benchmark=triviaqa", "strategy=nf", "limit=2", f"results_dir={tmp_path / 'r'}", env=_offline_env(tmp_path), timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: {HUB_LINE}"]
