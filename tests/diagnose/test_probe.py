"""The RSC probe end to end: NF calibration, CoT chains, perturbed re-scoring,
statistics, route and probe.json; strategy=madara reuses a finished probe."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from madara_cli.composition import compose
from madara_cli.config.identity import identify_probe
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from madara_cli.experiment.walk import ensure_probe
from tests.fakes import FORCED_RESCORE_SYSTEM, ScriptedBackend, cli, document_signature, scripted_probe

PROBE_FIELDS = {
    "model", "benchmark", "n", "rho", "p_values", "rho_star", "rho_bar", "rsc_class", "coupling", "per_query",
    "bootstrap", "split_half", "subsets30", "degenerate", "entropy", "em_nf", "route", "reason",
}


_TAG = re.compile(r"Evidence tag (\d+)")


def test_constant_scores_report_degenerate_not_nan(tmp_path):
    record, path, reused, *_ = scripted_probe(tmp_path, lambda user, sig: 0)
    assert not reused and path.is_file()
    saved = json.loads(path.read_text())  # strict JSON: no NaN anywhere
    json.dumps(saved, allow_nan=False)
    assert saved["rsc_class"] == "degenerate" and saved["rho"] is None
    assert saved["degenerate"]["is_degenerate"] and saved["degenerate"]["floor_share"] == 1.0
    assert PROBE_FIELDS <= set(saved)
    assert saved["route"] == "pde"  # NF EM is 0 on the calibration set


def test_reasoning_tracking_scores_are_quality_ordered_and_rerun_is_free(tmp_path):
    # A model whose scores follow the reasoning it is handed: its own chain (shuffled)
    # keeps the score, a contradicted chain blurs it, another pair's chain decides it.
    def score(user: str, sig: int) -> int:
        base = sig % 6
        tag = _TAG.search(user)
        if tag is None:  # normal CoT scoring
            return base
        if int(tag.group(1)) != sig:  # random chain: scored by what it describes
            return int(tag.group(1)) % 6
        if "irrelevant" in user:  # contradicted
            return min(5, max(0, base + (sig // 7) % 3 - 1))
        return base  # shuffled

    record, path, _, backend, pool, cfg = scripted_probe(tmp_path, score)
    assert record.n == 6 and set(record.to_dict()) >= PROBE_FIELDS
    r1, r2, r3 = record.rho
    assert r1 == pytest.approx(1.0) and r1 > r2 > r3
    assert record.rho_star == -1.0 and record.rsc_class == "quality-ordered" and record.coupling == "strong"
    assert record.route == "pde"  # NF EM 0 < 30%: isolation first, whatever the scoring
    assert record.scores.n_pairs == 60 and record.scores.parse_failures_normal == 0
    stages = record.accounting["by_stage"]
    assert stages["generate"]["requests"] == 6 and stages["rsc-cot"]["requests"] == 60 and stages["rsc-rescore"]["requests"] == 180

    # Same probe again: read from disk; forced: every call from the cache.
    again, _, reused = ensure_probe(cfg, pool, 6)
    assert reused and again == record and again.to_dict() == json.loads(path.read_text())
    calls = backend.calls
    forced, _, reused = ensure_probe(cfg, pool, 6, force=True)
    assert not reused and backend.calls == calls
    assert forced.rho == record.rho
    # Accounting is per probe: the forced rerun reports its own requests (all cache hits).
    forced_total = forced.accounting
    assert forced_total["requests"] == record.accounting["requests"] and forced_total["calls_issued"] == 0


def test_rescore_request_differs_from_the_normal_one_only_in_the_chain(tmp_path):
    """F.1: the perturbed chain "is presented as-is to the scoring prompt"."""
    from madara_cli.diagnose import perturb

    record, _, _, backend, _, _ = scripted_probe(tmp_path, _tracking, 6, "rsc.rescore=prefix")
    assert record.rescore == "prefix"
    normal = [r for r in backend.requests if isinstance(r, ChatRequest) and not r.prefix and "reasoning_steps" in r.messages[0].content]
    rescore = [r for r in backend.requests if isinstance(r, ChatRequest) and r.prefix]
    assert len(normal) == 60 and len(rescore) == 180
    by_messages = {r.messages: r for r in normal}
    for k, r in enumerate(rescore):
        twin = by_messages[r.messages]  # the very prompt that produced the normal score
        assert (r.temperature, r.top_p, r.seed) == (twin.temperature, twin.top_p, twin.seed)
        chain = json.loads(r.prefix + '3, "score": 0}')["reasoning_steps"]
        own = [f"Evidence tag {document_signature(r.messages[-1].content)}.", "The document is relevant to the question.", "It names the answer."]
        level = k // 60
        if level == 0:  # shuffled: the same sentences, another order
            assert sorted(chain) == sorted(own) and chain != own
        elif level == 1:  # contradicted: quality cues negated, step by step
            assert chain == [perturb.contradict_text(s) for s in own]
        else:  # random: another pair's chain, as it was written
            assert chain != own and len(chain) == 3


def test_forced_rescore_carries_the_chain_in_the_user_turn_and_no_prefix(tmp_path, capsys):
    """The default re-score (the authors' reading): its own prompt, the perturbed chain
    as a delimited previous analysis in the user turn, nothing begun for the model."""
    from madara_cli.agents.prompts import RESCORE_BEGIN, RESCORE_END
    from madara_cli.diagnose import perturb

    record, path, _, backend, _, cfg = scripted_probe(tmp_path, _tracking)
    assert json.loads(path.read_text())["rescore"] == "forced" and record.rescoring == "generate"
    normal = [r for r in backend.requests if isinstance(r, ChatRequest) and "reasoning_steps" in r.messages[0].content]
    forced = [r for r in backend.requests if isinstance(r, ChatRequest) and r.messages[0].content == FORCED_RESCORE_SYSTEM]
    assert len(normal) == 60 and len(forced) == 180
    assert not any(r.prefix for r in backend.requests if isinstance(r, ChatRequest))
    for k, r in enumerate(forced):
        assert [m.role for m in r.messages] == ["system", "user"]
        user = r.messages[1].content
        assert user.startswith("Question: ") and "\nDocument:\n" in user
        block = user.split(RESCORE_BEGIN + "\n", 1)[1].split("\n" + RESCORE_END, 1)[0]
        chain = [line[2:] for line in block.splitlines()]
        own = [f"Evidence tag {document_signature(user)}.", "The document is relevant to the question.", "It names the answer."]
        if k // 60 == 1:
            assert chain == [perturb.contradict_text(s) for s in own]
        elif k // 60 == 0:
            assert sorted(chain) == sorted(own) and chain != own
        assert (r.temperature, r.seed) == (float(cfg.model.temperature), int(cfg.seed))
    # The same tracking model is diagnosed the same way under either reading.
    r1, r2, r3 = record.rho
    assert r1 == pytest.approx(1.0) and r1 > r2 > r3 and record.rsc_class == "quality-ordered"
    prefix, *_ = scripted_probe(tmp_path / "p", _tracking, 6, "rsc.rescore=prefix")
    assert prefix.key != record.key and prefix.rho == pytest.approx(record.rho)
    from madara_cli.commands.probe_verbs import print_probe

    print_probe(record, path, False)
    assert "re-score: rsc.rescore=forced, rsc.rescoring=generate" in capsys.readouterr().out


def test_forced_rescore_cuts_the_document_to_2000_characters():
    from madara_cli.agents.prompts import RESCORE_DOC_CHARS
    from madara_cli.agents.requests import forced_rescore_request
    from madara_cli.core.records import Doc, Example

    doc = Doc("long", "x" * 5000, "Title")
    example = Example("q", "Where?", ("Varn",), (doc,))
    req = forced_rescore_request(example, doc, ["step one."], mode="logprob", max_tokens=64, temperature=0.6, seed=0)
    assert isinstance(req, ScoreRequest) and req.prefix == '{"score": '
    user = req.messages[1].content
    assert ("Title\n" + "x" * (RESCORE_DOC_CHARS - 6)) in user and "x" * (RESCORE_DOC_CHARS - 5) not in user
    assert "- step one." in user


def test_chains_without_steps_lose_their_score_fields_and_empty_ones_are_excluded(tmp_path):
    """A CoT reply without reasoning_steps: its prose is the chain, minus every score
    and confidence field; a reply that is nothing but fields leaves the probe."""

    class NoSteps(ScriptedBackend):
        def chat(self, requests):
            out = super().chat(requests)
            for n, r in enumerate(requests):
                if "reasoning_steps" in r.messages[0].content:
                    sig = document_signature(r.messages[-1].content)
                    if sig % 3 == 0:  # nothing but the fields
                        text = json.dumps({"score": sig % 6, "confidence": 4})
                    else:  # prose, then the object without steps
                        text = f"Evidence tag {sig}. The document is relevant.\n" + json.dumps({"confidence": 4, "score": sig % 6})
                    out[n] = Completion(text=text)
            return out

    cfg = compose(["benchmark=mini", f"results_dir={tmp_path}"])
    backend = NoSteps(_tracking)
    record, _, _ = ensure_probe(cfg, EnginePool(factory=lambda c: backend), 6)
    sc = record.scores
    empty = sum(1 for r in backend.requests if isinstance(r, ChatRequest) and "reasoning_steps" in r.messages[0].content
                and document_signature(r.messages[-1].content) % 3 == 0)
    assert 0 < empty < 60 and sc.chains_empty == empty and sc.n_pairs_probed == 60 - empty and sc.chains_from_raw_text == 60
    forced = [r.messages[1].content for r in backend.requests if isinstance(r, ChatRequest) and r.messages[0].content == FORCED_RESCORE_SYSTEM]
    assert len(forced) == 3 * (60 - empty)
    for user in forced:
        analysis = user.split("PREVIOUS ANALYSIS >>>\n", 1)[1].split("\n<<<", 1)[0]
        assert "score" not in analysis.lower() and "confidence" not in analysis.lower() and "Evidence tag" in analysis


def _tracking(user: str, sig: int) -> int:
    base = sig % 6
    tag = _TAG.search(user)
    if tag is None:
        return base
    if int(tag.group(1)) != sig:
        return int(tag.group(1)) % 6
    if "irrelevant" in user:
        return min(5, max(0, base + (sig // 7) % 3 - 1))
    return base


def test_prefix_rescores_under_the_authors_parser_read_the_continuation(tmp_path):
    """reading=authors rsc.rescore=prefix: the reply continues the begun object
    (``3, "score": 4``), which the authors' parser read alone as no object: every re-score
    0, rho [0, 0, 0], the route changed without a word. Read as the object's rest, the
    same tracking model is diagnosed as under madara's parser."""
    mine, *_ = scripted_probe(tmp_path / "m", _tracking, 6, "rsc.rescore=prefix", "reading.score_parser=authors")
    theirs, *_ = scripted_probe(tmp_path / "a", _tracking, 6, "rsc.rescore=prefix")
    assert mine.scores.parse_failures_rescored == 0
    r1, r2, r3 = mine.rho
    assert r1 == pytest.approx(1.0) and r1 > r2 > r3 and mine.rsc_class == "quality-ordered"
    assert mine.rho == pytest.approx(theirs.rho)


def test_logprob_rescoring_gives_the_same_diagnosis(tmp_path):
    gen, *_ = scripted_probe(tmp_path / "g", _tracking)
    lp, *_ = scripted_probe(tmp_path / "l", _tracking, 6, "rsc.rescoring=logprob")
    assert "rsc-rescore" in lp.accounting["by_stage"] and lp.rho == pytest.approx(gen.rho)
    assert lp.key != gen.key  # a different protocol is a different probe


def test_probe_key_ignores_strategy_and_limit():
    a = identify_probe(compose(["strategy=nf", "limit=3"]), 10)
    b = identify_probe(compose(["strategy=madara"]), 10)
    c = identify_probe(compose(["seed=1"]), 10)
    assert a.key == b.key != c.key
    assert a.with_n(4) == identify_probe(compose(["strategy=nf"]), 4)  # the hash leaves the calibration size out


def test_the_probe_spec_is_derived_once_per_probe(tmp_path, monkeypatch):
    from madara_cli.config import identity as identify

    calls = []
    original = identify.probe_identity
    monkeypatch.setattr(identify, "probe_identity", lambda *a, **k: calls.append(a) or original(*a, **k))
    record, path, reused, *_ = scripted_probe(tmp_path, _tracking)
    assert not reused and len(calls) == 1 and path.parent.name == record.key
    calls.clear()
    _, again, reused, *_ = scripted_probe(tmp_path, _tracking)
    assert reused and again == path and len(calls) == 1


@pytest.mark.llm
def test_probe_cli_on_cpu_then_madara_reuses_it(tmp_path):
    args = [
        "probe", "--model", "smollm2-135m", "--benchmark", "mini", "--n", "3",
        f"results_dir={tmp_path}", "generation.cot_max_tokens=96", "rsc.rescoring=logprob",
    ]
    r = cli(*args, timeout=1200)
    assert r.returncode == 0, r.stderr
    assert "route:" in r.stdout and re.search(r"class: \S+", r.stdout)
    (path,) = list(tmp_path.glob("probes/*/probe.json"))
    record = json.loads(path.read_text())
    assert PROBE_FIELDS <= set(record) and record["n"] == 3
    assert record["route"] in {"pde", "sda", "cot", "atf"}

    # strategy=madara on the same settings finds this probe and runs its route.
    cfg = compose(["strategy=madara", "limit=2", f"results_dir={tmp_path}", "generation.cot_max_tokens=96", "rsc.rescoring=logprob",
                   "benchmark.calibration=3", "strategy.scoring=logprob"])
    with EnginePool() as pool:
        res = run_cell(cfg, pool)
    m = res.metrics
    assert m["madara"]["probe_reused"] and m["madara"]["route"] == record["route"]
    assert "rsc-cot" not in m["accounting"]["by_stage"]


@pytest.mark.parametrize(
    "override, needle",
    [
        ("rsc.rescore=bogus", "rsc.rescore='bogus' is not a valid choice; valid: forced, prefix"),
        ("benchmark.candidates=some", "benchmark.candidates='some' is not a valid choice; valid: retrieved, all"),
    ],
)
def test_bad_rescore_or_candidates_choice_is_one_clear_line(override, needle):
    from madara_cli.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        compose([override])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_probe_key_moves_with_the_rescore_reading_and_madara_cells_with_it():
    from madara_cli.experiment.grid import cell_from_cfg

    forced, prefix = (compose(["strategy=madara", *extra]) for extra in ([], ["rsc.rescore=prefix"]))
    assert identify_probe(forced, 10).key != identify_probe(prefix, 10).key
    assert cell_from_cfg(forced).key != cell_from_cfg(prefix).key
    nf = [compose(["strategy=nf", *extra]) for extra in ([], ["rsc.rescore=prefix"])]
    assert cell_from_cfg(nf[0]).key == cell_from_cfg(nf[1]).key  # a strategy that runs no probe keeps its key


def test_cot_budget_is_512_and_cut_replies_are_counted_cached_or_not(tmp_path):
    """The authors allow 512 tokens per assessor reply; a CoT reply that stops there
    (finish reason "length") is counted in the probe and in the stage's accounting."""

    class Cut(ScriptedBackend):
        def chat(self, requests):
            out = super().chat(requests)
            return [replace(c, finish_reason="length") if "reasoning_steps" in r.messages[0].content else c
                    for r, c in zip(requests, out)]

    cfg = compose(["benchmark=mini", f"results_dir={tmp_path}"])
    backend = Cut(_tracking)
    pool = EnginePool(factory=lambda c: backend)
    record, _, _ = ensure_probe(cfg, pool, 6)
    cot = [r for r in backend.requests if isinstance(r, ChatRequest) and "reasoning_steps" in r.messages[0].content]
    assert {r.max_tokens for r in cot} == {512}
    assert record.scores.cot_cut_at_max_tokens == 60 and record.accounting["by_stage"]["rsc-cot"]["cut_at_max_tokens"] == 60
    assert record.accounting["by_stage"]["rsc-rescore"]["cut_at_max_tokens"] == 0
    again, _, _ = ensure_probe(cfg, pool, 6, force=True)  # every reply from the cache, still counted
    assert again.accounting["calls_issued"] == 0 and again.accounting["by_stage"]["rsc-cot"]["cut_at_max_tokens"] == 60


# --- one typed record: what the probe computes is what it writes and what the store reads ---

# sha256 of the two probe.json texts below as written before the statistics were typed once
# (madara 62abdde: rsc.ProbeStats.to_dict() merged into a dict, read by ProbeRecord.from_dict).
_FIXED_PROBES_SHA256 = "fc3e1ec087f2a70520e127ffafa38ad64f75f2da8685c66cefe2505df919575c"


def _fixed_probe_records():
    import numpy as np

    from madara_cli.diagnose import rsc
    from madara_cli.results.outputs import Calibration, ProbeRecord, ProbeScores
    from madara_cli.results.probe_stats import ProbeStats

    rng = np.random.default_rng(11)
    latent = rng.normal(size=(36, 5))
    score = lambda z: np.clip(np.round(2.5 + 1.2 * z), 0, 5)  # noqa: E731
    normal = score(latent)
    normal[3, 1] = np.nan  # a parse failure
    levels = [score(latent + rng.normal(scale=s, size=latent.shape)) for s in (0.4, 1.5, 6.0)]
    floor = np.zeros((36, 5))
    floor[0, 0] = 1  # degenerate: 99% of scores at the floor
    records = []
    for x in (normal, floor):
        stats = rsc.summarize_probe(x, levels, seed=5, n_resamples=40)
        assert ProbeStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats
        records.append((stats, ProbeRecord(
            model="m", benchmark="b", n=36, key="m__b__n36__abcd1234", config_hash="abcd1234",
            **{name: getattr(stats, name) for name in ProbeStats.names()},
            em_nf=0.5, route="atf", reason="because",
            scores=ProbeScores(normal=[1.0, None], parse_failures_normal=1, parse_failures_rescored=0, n_pairs=180,
                               chains_from_raw_text=0, chains_empty=0, n_pairs_probed=180, cot_cut_at_max_tokens=0),
            calibration=Calibration(n=36, split="nested", rule="first 36"), rescore="forced", rescoring="generate",
        )))  # fmt: skip
    return records


def test_probe_json_from_fixed_numbers_is_byte_identical_to_before():
    import hashlib

    texts = [record.to_json() for _, record in _fixed_probe_records()]
    assert hashlib.sha256("".join(texts).encode()).hexdigest() == _FIXED_PROBES_SHA256
    assert '"rsc_class": "quality-ordered"' in texts[0] and '"rsc_class": "degenerate"' in texts[1]


def test_the_store_reads_back_the_typed_statistics_the_probe_computed(tmp_path):
    from madara_cli.results import record_files
    from madara_cli.results.probe_stats import Bootstrap, Degeneracy, PerQuery, ProbeStats, SplitHalf, Subsets

    for stats, record in _fixed_probe_records():
        back = record_files.read_probe(record_files.write_probe(tmp_path / record.rsc_class, record))
        assert back == record
        assert ProbeStats.from_dict(back.to_dict()) == stats  # the statistics part, typed the same
        if not stats.is_degenerate:
            assert isinstance(back.per_query, PerQuery) and back.per_query == stats.per_query
            assert isinstance(back.bootstrap, Bootstrap) and back.bootstrap == stats.bootstrap
            assert isinstance(back.split_half, SplitHalf) and back.split_half.agree
            assert isinstance(back.subsets30, Subsets) and back.subsets30 == stats.subsets30
            assert back.per_query.n_defined == stats.per_query.n_defined and max(back.per_query.n_defined) <= 36
        assert isinstance(back.degenerate, Degeneracy) and back.is_degenerate == stats.is_degenerate
