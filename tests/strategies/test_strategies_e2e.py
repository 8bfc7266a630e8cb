"""Every strategy end to end: (a) on a deterministic fake engine through the real
cache, runner and configs; (b) marked ``llm``: on the embedded SmolLM2 via llama.cpp."""

from __future__ import annotations

import builtins
import json
import re

import pytest

from madara_cli.backends.base import Backend
from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition import compose, ensure_loaded
from madara_cli.config import strategy_settings
from madara_cli.core.errors import BackendError
from madara_cli.core.records import ChatRequest
from madara_cli.data.mini import generate
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from madara_cli.strategies import StrategyContext, strategy_fn
from tests.fakes import FAKE_STRATEGIES, FakeBackend

ensure_loaded()  # every plug-in registered, as composition does first

SCORE_STAGES = ("score", "score-cot", "score-logprob", "score-conflict", "score-cot-conflict", "score-logprob-conflict")


def test_fake_backend_implements_protocol():
    assert isinstance(FakeBackend(), Backend)


@pytest.fixture
def examples():
    return generate(8)


def _ctx(llm: CachedLLM, name: str, *extra: str) -> StrategyContext:
    return StrategyContext(llm=llm, cfg=compose([f"strategy={name}", *extra]))


def _run(llm: CachedLLM, name: str, examples, *extra: str):
    ctx = _ctx(llm, name, *extra)
    with llm.fresh_accounting() as acc:
        preds = strategy_fn(ctx.strategy.name)(ctx, examples)
    return preds, ctx, acc


def _calls(acc, stage: str) -> int:
    return acc.by_stage[stage].calls_issued if stage in acc.by_stage else 0


@pytest.fixture
def llm(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    yield CachedLLM(FakeBackend(), cache)
    cache.close()


@pytest.mark.parametrize("name", FAKE_STRATEGIES)
def test_every_strategy_answers_every_example(llm, examples, name):
    preds, ctx, _ = _run(llm, name, examples)
    assert [p.example_id for p in preds] == [ex.id for ex in examples]
    for ex, p in zip(examples, preds):
        ids = {d.id for d in ex.docs}
        assert set(p.doc_ids) <= ids and p.doc_ids
        if "supporting_in_topk" in p.extra:
            assert p.extra["supporting_in_topk"] == len(set(ex.meta["supporting"]) & set(p.doc_ids))
    json.dumps(ctx.report, allow_nan=False)  # metrics.json refuses NaN


def test_selection_sizes(llm, examples):
    for name, lo, hi in (("three_agent", 5, 5), ("sda", 5, 5), ("rrf", 5, 5), ("atf", 2, 5), ("pde", 5, 5), ("pde_random", 5, 5)):
        preds, _, _ = _run(llm, name, examples)
        assert all(lo <= len(p.doc_ids) <= hi for p in preds), name


@pytest.mark.parametrize("name", ["three_agent", "cot", "sda", "sda_cot", "rrf", "atf"])
def test_selection_follows_the_examples_own_scores(llm, examples, name):
    import numpy as np

    from madara_cli.strategies.assessed import assess_cell
    from madara_cli.strategies.selection import atf_select, rrf_fuse, sda_rank, top_k, weighted_aggregate

    preds, ctx, _ = _run(llm, name, examples)
    st = ctx.strategy
    for ex, p in zip(examples, preds):
        (mat,) = assess_cell(ctx, [ex])  # scored alone: the same requests, from the cache
        assert p.extra["scores"] == mat.to_json()
        if name in ("sda", "sda_cot"):
            ranking = sda_rank(mat.scores, st.weights, ties=st.rank_ties)
        elif name == "rrf":
            ranking = rrf_fuse(mat.scores, st.rrf_k, st.weights)
        else:
            ranking = weighted_aggregate(mat.scores, st.weights)
        if name == "atf":
            expected = atf_select(ranking, st.kappa, st.min_keep, st.top_k)
        else:
            expected = top_k(ranking, st.top_k)
        assert p.extra["selected"] == expected
        assert p.doc_ids == tuple(ex.docs[i].id for i in expected)
        assert np.allclose([v for v in p.extra["ranking"]], ranking, atol=1e-4)


def test_sda_after_three_agent_issues_no_scoring_call(llm, examples):
    _, _, first = _run(llm, "three_agent", examples)
    # Two agents per document, the Conflict Detector once per query (strategy.conflict=per_query).
    assert _calls(first, "score") == 8 * 10 * 2 and _calls(first, "score-conflict") == 8
    for name in ("sda", "atf", "rrf", "pde", "pde_uniform"):
        _, _, acc = _run(llm, name, examples)
        for stage, n in (("score", 160), ("score-conflict", 8)):
            assert acc.by_stage[stage].requests == n, name
            assert _calls(acc, stage) == 0, name
            assert acc.by_stage[stage].cache_hits == n, name


def test_sda_cot_reads_the_cot_scores(llm, examples):
    _, _, first = _run(llm, "cot", examples)
    assert _calls(first, "score-cot") == 160 and _calls(first, "score-cot-conflict") == 8 and "score" not in first.by_stage
    _, _, acc = _run(llm, "sda_cot", examples)
    assert _calls(acc, "score-cot") == 0 and acc.by_stage["score-cot"].cache_hits == 160
    assert _calls(acc, "score-cot-conflict") == 0 and acc.by_stage["score-cot-conflict"].cache_hits == 8


def test_rerun_is_free_and_identical(llm, examples):
    a, _, _ = _run(llm, "three_agent", examples)
    b, _, acc = _run(llm, "three_agent", examples)
    assert a == b
    assert acc.total().calls_issued == 0


def test_pde_random_makes_no_assessment_call(llm, examples):
    preds, ctx, acc = _run(llm, "pde_random", examples)
    assert not any(s in acc.by_stage for s in SCORE_STAGES)
    assert "assessment" not in ctx.report
    assert _calls(acc, "pde-extract") == 8 * 5
    again, _, _ = _run(llm, "pde_random", examples)
    assert [p.doc_ids for p in preds] == [p.doc_ids for p in again]  # seeded


def test_pde_variants_share_extractions(llm, examples):
    _run(llm, "pde", examples)
    _, _, acc = _run(llm, "pde_uniform", examples)
    assert _calls(acc, "pde-extract") == 0  # same top-5, same per-document requests
    _, _, acc = _run(llm, "main_rag", examples)
    # The Predictor reuses PDE's answers (a few mini documents share their text, so
    # their requests coincide and hits can exceed the 5 per example PDE asked for).
    assert acc.by_stage["pde-extract"].requests == 8 * 10
    assert acc.by_stage["pde-extract"].cache_hits >= 8 * 5
    assert _calls(acc, "pde-extract") <= 8 * 5


def test_pde_extraction_is_the_generator_with_one_document(tmp_path, examples):
    from madara_cli.agents.generator import generation_request

    seen: list[ChatRequest] = []

    class Recording(FakeBackend):
        def chat(self, requests):
            seen.extend(requests)
            return super().chat(requests)

    llm = CachedLLM(Recording(), ResponseCache(tmp_path / "rec.sqlite"))
    preds, ctx, _ = _run(llm, "pde", examples, "seed=3")
    gen = ctx.cfg.generation
    ex, p = examples[0], preds[0]
    by_id = {d.id: d for d in ex.docs}
    for doc_id in p.doc_ids:
        assert generation_request(ex, [by_id[doc_id]], gen.max_tokens, ctx.temperature, 3) in seen


def test_main_rag_keeps_documents_above_the_mean_judge_score(llm, examples):
    preds, ctx, acc = _run(llm, "main_rag", examples)
    assert acc.by_stage["main-rag-judge"].requests == 8 * 10
    for p in preds:
        s, kept = p.extra["judge_scores"], p.extra["selected"]
        assert [s[i] for i in kept] == sorted((v for v in s if v >= p.extra["threshold"] - 1e-3), reverse=True)
        assert p.extra["threshold"] == pytest.approx(sum(s) / len(s), abs=1e-3)  # n = 0: the mean
        assert p.doc_ids == tuple(examples[[e.id for e in examples].index(p.example_id)].docs[i].id for i in kept)


def test_pde_votes_are_score_weighted(llm, examples):
    preds, _, _ = _run(llm, "pde", examples)
    for p in preds:
        votes = p.extra["votes"]
        assert votes, p
        from madara_cli.core.metrics import normalize

        assert normalize(p.answer) in votes
        assert votes[normalize(p.answer)] == pytest.approx(max(votes.values()))
        assert sum(votes.values()) == pytest.approx(sum(w for a, w in zip(p.extra["answers"], p.extra["vote_weights"]) if normalize(a)), abs=1e-3)


def test_self_consistency_reuses_the_nf_generation(llm, examples):
    _run(llm, "nf", examples)
    _, _, acc = _run(llm, "self_consistency", examples)
    assert acc.by_stage["self-consistency"].cache_hits == 8  # sample 0 is the NF request


def test_logprob_scoring(llm, examples):
    preds, ctx, acc = _run(llm, "three_agent", examples, "strategy.scoring=logprob")
    assert _calls(acc, "score-logprob") == 160 and _calls(acc, "score-logprob-conflict") == 8 and "score" not in acc.by_stage
    rep = ctx.report["assessment"]
    assert rep["mode"] == "logprob" and rep["parse_failure_rate"] == 0.0
    assert 0.0 < rep["mean_score"] < 5.0
    flat = [v for p in preds for row in p.extra["scores"] for v in row]
    assert all(0.0 <= v <= 5.0 for v in flat)


def test_logprob_with_cot_is_refused(llm, examples):
    with pytest.raises(ValueError, match="logprob"):
        _run(llm, "cot", examples, "strategy.scoring=logprob")


def test_malformed_agent_output_is_counted_not_fatal(tmp_path, examples):
    backend = FakeBackend(malformed=True)
    llm = CachedLLM(backend, ResponseCache(tmp_path / "c.sqlite"))
    for name in ("three_agent", "sda", "atf", "rrf", "pde"):
        # One reply per score, so failures / replies is the failure rate (a per-query
        # detector reply holds ten scores: tests/agents/test_conflict_detector.py).
        preds, ctx, _ = _run(llm, name, examples, "strategy.conflict=per_document")
        assert len(preds) == 8
        rep = ctx.report["assessment"]
        assert backend.broken > 0
        assert rep["parse_failure_rate"] == pytest.approx(backend.broken / backend.agent_replies)
        assert set(rep["failures"]) == {"no_score", "out_of_range", "empty"}
        json.dumps(ctx.report, allow_nan=False)
    preds, ctx, _ = _run(llm, "cot", examples)
    assert 0 < ctx.report["assessment"]["parse_failure_rate"] < 1


def test_cross_encoder_without_sentence_transformers(monkeypatch, llm, examples):
    from madara_cli.strategies import cross_encoder

    real_import = builtins.__import__

    def no_st(name, *args, **kwargs):
        if name.startswith("sentence_transformers"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_st)
    monkeypatch.setattr(cross_encoder, "_MODELS", {})
    with pytest.raises(BackendError, match=re.escape("pip install -e '.[dense]'")):
        _run(llm, "cross_encoder", examples)


def test_cross_encoder_reranks_by_its_scores(monkeypatch, llm, examples):
    from madara_cli.strategies import cross_encoder

    # A stand-in scorer: prefers documents that mention the question's subject.
    def fake_scores(name, pairs):
        import numpy as np

        return np.array([float(sum(w in d for w in q.split()[2:4])) for q, d in pairs])

    monkeypatch.setattr(cross_encoder, "cross_encoder_scores", fake_scores)
    preds, ctx, acc = _run(llm, "cross_encoder", examples)
    assert len(preds) == 8 and all(len(p.doc_ids) == 5 for p in preds)
    assert not any(s in acc.by_stage for s in SCORE_STAGES)
    for p in preds:
        s = p.extra["ce_scores"]
        assert [s[i] for i in p.extra["selected"]] == sorted(s, reverse=True)[:5]


@pytest.mark.parametrize("name", ["three_agent", "pde", "main_rag", "atf"])
def test_run_cell_writes_metrics(tmp_path, name):
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        cfg = compose([f"strategy={name}", "limit=4", f"results_dir={tmp_path}"])
        res = run_cell(cfg, pool, examples=generate(4))
    metrics = json.loads((res.folder / "metrics.json").read_text())
    assert metrics["n"] == 4
    rows = [json.loads(line) for line in (res.folder / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    if name != "main_rag":
        assert "assessment" in metrics and metrics["assessment"]["n_scores"] == 4 * 10 * 3


# --------------------------------------------------------------------------- #
# (b) the real embedded model
# --------------------------------------------------------------------------- #

REAL_STRATEGIES = [
    "three_agent", "cot", "sda", "sda_cot", "atf", "rrf", "pde", "pde_uniform", "pde_random",
    "self_consistency", "main_rag", "cross_encoder",
]
# Short generations keep the CPU run to minutes; the code paths are the same.
FAST = ["limit=3", "retriever.k=5", "strategy.top_k=3", "generation.score_max_tokens=16", "generation.cot_max_tokens=48", "generation.max_tokens=12"]


@pytest.fixture(scope="module")
def real_pool(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    root = tmp_path_factory.mktemp("real")
    with EnginePool() as pool:
        yield pool, root


@pytest.mark.llm
@pytest.mark.parametrize("name", REAL_STRATEGIES)
def test_real_model_end_to_end(real_pool, name):
    pool, root = real_pool
    if name == "cross_encoder":
        pytest.importorskip("sentence_transformers")
        from huggingface_hub import try_to_load_from_cache

        # Never download in a test: without cached weights, skip at once.
        if not isinstance(try_to_load_from_cache(str(compose(["strategy=cross_encoder"]).strategy.cross_encoder), "config.json"), str):
            pytest.skip("cross-encoder weights are not in the local Hugging Face cache")
    # strategy.top_k only where the strategy keeps a top-k (self-consistency and MAIN-RAG do not)
    fast = [o for o in FAST if not o.startswith("strategy.") or o.split("=")[0].split(".")[1] in strategy_settings(name)]
    cfg = compose([f"strategy={name}", f"results_dir={root}", *fast])
    try:
        res = run_cell(cfg, pool)
    except BackendError as e:
        if name == "cross_encoder" and "could not load cross-encoder" in str(e):
            pytest.skip(f"cross-encoder weights unavailable: {e}")
        raise
    metrics = json.loads((res.folder / "metrics.json").read_text())
    assert metrics["n"] == 3
    assert 0.0 <= metrics["em"] <= 1.0
    if name not in ("pde_random", "self_consistency", "main_rag", "cross_encoder"):
        assert metrics["assessment"]["n_scores"] == 3 * 5 * 3


@pytest.mark.llm
def test_real_model_logprob_scoring(real_pool):
    pool, root = real_pool
    cfg = compose(["strategy=sda", "strategy.scoring=logprob", f"results_dir={root}", *FAST])
    metrics = run_cell(cfg, pool).metrics
    rep = metrics["assessment"]
    # Digit scores cannot fail; the Conflict Detector's one reply per query is generated
    # (strategy.conflict=per_query), and what it leaves out is counted.
    assert rep["mode"] == "logprob" and rep["by_agent"]["relevance"]["parse_failure_rate"] == 0.0
    assert rep["by_agent"]["consistency"]["parse_failure_rate"] == 0.0
    assert rep["conflict"]["calls"] == "per_query" and rep["conflict"]["replies"] == 3 * (2 * 5 + 1)
    assert 0.0 < rep["mean_score"] < 5.0
