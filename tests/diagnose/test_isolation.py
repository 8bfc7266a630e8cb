"""madara's isolation probe and routing policy (README "Beyond the paper"): the rule on
hand-made diagnostics, the comparison on the paper's published numbers, the probe's
measurement on a scripted engine, and keys that do not move while it is off."""

from __future__ import annotations

import json
import math
from typing import Sequence

import pytest
from scipy import stats as sps

from madara_cli import paper as pv
from madara_cli.audit.policies import compare_policies, mean_gaps
from madara_cli.composition import compose
from madara_cli.config.identity import identify_probe
from madara_cli.core.records import ChatRequest, Completion, ScoreRequest
from madara_cli.diagnose import router
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.experiment.runner import run_cell
from madara_cli.experiment.walk import ensure_probe
from tests.fakes import cli

QO = (0.76, 0.43, 0.08)  # quality-ordered, strongly coupled: the scoring arm is ATF
STOCHASTIC = (0.39, 0.04, 0.14)


def iso(em_nf: float, em_iso: float, n: int = 100, p: float | None = None) -> router.Isolation:
    measured = router.Isolation.from_published(em_nf, em_iso, n, "test")
    return measured if p is None else router.Isolation(em_nf, em_iso, n, p, source="test")


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "em_nf, rho, isolation, expected",
    [
        (14.0, QO, iso(14.0, 40.0), "pde"),  # weak baseline, isolation helps: the paper's PDE
        (14.0, QO, iso(14.0, 12.0), "atf"),  # weak baseline, isolation does not help: scoring arm
        (14.0, QO, iso(14.0, 14.0), "atf"),  # no gain at all is no reason to pay for isolation
        (14.0, STOCHASTIC, iso(14.0, 5.0), "sda"),
        (40.0, QO, iso(40.0, 44.0, p=0.2), "atf"),  # strong baseline, gain not significant: scoring
        (40.0, QO, iso(40.0, 60.0, p=1e-6), "pde"),  # strong baseline, significant gain: isolation
        (40.0, QO, iso(40.0, 30.0, p=1e-6), "atf"),  # significant, but a loss
        (40.0, None, iso(40.0, 30.0, p=1e-6), "pde"),  # degenerate scoring: no usable scores (§6.2)
    ],
)
def test_isolation_policy_rule(em_nf, rho, isolation, expected):
    decision = router.route_isolation(router.Diagnostics(em_nf, rho), isolation)
    assert decision.strategy == expected
    assert "Δ_iso" in decision.reason


def test_without_a_measurement_the_isolation_policy_is_the_papers():
    for em_nf in (5.0, 29.9, 30.0, 80.0):
        for rho in (QO, STOCHASTIC, (0.3, 0.2, 0.1), None):
            diag = router.Diagnostics(em_nf, rho)
            assert router.route_isolation(diag, None) == router.route(diag)
            assert router.route_policy("isolation", diag) == router.route_policy("paper", diag) == router.route(diag)
    with pytest.raises(ValueError, match="valid: paper, isolation"):
        router.route_policy("oracle", router.Diagnostics(10.0, QO))


def test_agreeing_measurement_reproduces_the_papers_route():
    """Where the gain agrees with the NF gate the policies cannot differ."""
    for em_nf, gain in ((10.0, 5.0), (25.0, 30.0), (50.0, -3.0), (70.0, 2.0)):
        for rho in (QO, STOCHASTIC, (0.3, 0.2, 0.1)):
            diag = router.Diagnostics(em_nf, rho)
            assert router.route_isolation(diag, iso(em_nf, em_nf + gain, n=50)).strategy == router.route(diag).strategy


def test_thresholds_are_settings():
    diag = router.Diagnostics(14.0, QO)
    small = iso(14.0, 15.0)
    assert router.route_isolation(diag, small).strategy == "pde"
    assert router.route_isolation(diag, small, router.Thresholds(iso_min_gain=2.0)).strategy == "atf"
    strong = router.Diagnostics(40.0, QO)
    assert router.route_isolation(strong, iso(40.0, 45.0, p=0.03)).strategy == "pde"
    assert router.route_isolation(strong, iso(40.0, 45.0, p=0.03), router.Thresholds(iso_alpha=0.01)).strategy == "atf"


def test_isolation_from_outcomes_is_exact_mcnemar():
    nf = [True, False, False, False, True, False, False, False, False, False]
    pr = [True, True, True, True, False, True, False, True, False, False]
    m = router.Isolation.from_outcomes(nf, pr)
    assert (m.b, m.c, m.n) == (5, 1, 10)
    assert m.em_nf == pytest.approx(20.0) and m.em_iso == pytest.approx(60.0) and m.gain == pytest.approx(40.0)
    assert m.p_value == pytest.approx(sps.binomtest(1, 6, 0.5).pvalue)
    with pytest.raises(ValueError):
        router.Isolation.from_outcomes([True], [True, False])


def test_least_significant_pairing_bounds_every_pairing():
    n, k_nf, k_iso = 40, 12, 20
    worst = router.least_significant_mcnemar(100 * k_nf / n, 100 * k_iso / n, n)
    # Enumerate every 2x2 table with those margins: none is less significant.
    ps = []
    for both in range(0, min(k_nf, k_iso) + 1):
        c, b = k_nf - both, k_iso - both
        if b + c + both <= n:
            ps.append(sps.binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0)
    assert worst == pytest.approx(max(ps))
    assert worst > min(ps)


# --- the paper's published numbers ---------------------------------------------------------------


def _rows():
    return {(r.pair.model, r.pair.benchmark, r.pair.setting): r for r in compare_policies()}


def test_isolation_policy_keeps_table2_and_fixes_the_papers_own_misroutes():
    rows = _rows()
    for model, benchmark in pv.ROUTING_PAIRS:
        r = rows[(model, benchmark, "Table 2")]
        assert r.routes["paper"] == r.routes["isolation"] == pv.TABLE2[(model, benchmark, "strategy")], (model, benchmark)
    # §6.5 / App. J: both MuSiQue pairs are weak baselines that isolation hurts.
    for model, setting in (("qwen2.5-7b", "Table 6"), ("mistral-7b", "App. J")):
        r = rows[(model, "musique", setting)]
        assert r.routes["paper"] == "pde" and r.routes["nf_only"] == "pde"
        assert r.routes["isolation"] in {"sda", "cot", "atf"}
    assert rows[("qwen2.5-7b", "musique", "Table 6")].gaps["paper"] == pytest.approx(6.0)
    assert rows[("mistral-7b", "musique", "App. J")].gaps["paper"] == pytest.approx(11.0)
    # §6.4 / Table 16: Llama's dense TriviaQA NF sits just above tau_NF; the gain is decisive.
    dense = rows[("llama-3.1-8b", "triviaqa", "Table 16, dense")]
    assert dense.routes["paper"] == "scoring" and dense.routes["isolation"] == "pde"
    assert dense.gaps["isolation"] == 0.0 and dense.pair.iso.p_value < 1e-5
    # Where the gain is small the strong baselines stay with the paper's scoring arm.
    for model in ("mistral-7b", "qwen3-8b", "qwen2.5-7b", "gemma-2-9b"):
        r = rows[(model, "triviaqa", "Table 16, dense")]
        assert r.routes["paper"] == r.routes["isolation"] == "scoring"
    changed = {k for k, r in rows.items() if r.routes["isolation"] != r.routes["paper"]}
    assert changed == {("qwen2.5-7b", "musique", "Table 6"), ("mistral-7b", "musique", "App. J"), ("llama-3.1-8b", "triviaqa", "Table 16, dense")}


def test_policy_comparison_gaps():
    rows = list(compare_policies())
    means, n = mean_gaps(rows)
    assert n >= 10 and set(means) == {"paper", "nf_only", "isolation"}
    assert means["isolation"] <= means["paper"] <= means["nf_only"]
    qwen = _rows()[("qwen2.5-7b", "musique", "Table 6")]
    assert qwen.gaps["isolation"] is None and qwen.bounds["isolation"] == (0.0, 9.0)  # ATF not printed on MuSiQue


def test_route_cli_published_isolation():
    r = cli("route", "--published", "--policy", "isolation", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "isolation policy keeps 10/10 of Table 2's routes" in r.stdout
    assert "mean oracle gap" in r.stdout and "musique" in r.stdout
    audit = cli("audit", "--policies", timeout=120)
    assert audit.returncode == 0 and "Where the isolation policy differs from the paper's: qwen2.5-7b / musique" in audit.stdout
    assert "| pair | NF | Δ_iso (p) |" in audit.stdout
    bad = cli("route", "--nf", "14", "--policy", "oracle", timeout=120)
    assert bad.returncode != 0 and "valid: paper, isolation" in bad.stderr and "Traceback" not in bad.stderr
    one = cli("route", "--nf", "14", "--rho", "0.83", "0.54", "0.03", "--policy", "isolation", "--iso-em", "12", "--iso-n", "100", timeout=120)
    assert one.returncode == 0, one.stderr
    assert "route: atf" in one.stdout.replace("\n", " ")


# --- keys ---------------------------------------------------------------------------------------


def test_keys_do_not_move_while_the_isolation_probe_is_off():
    base = compose(["strategy=madara", "benchmark=mini"])
    spelled = compose(["strategy=madara", "benchmark=mini", "rsc.isolation_probe=false", "router.policy=paper"])
    on = compose(["strategy=madara", "benchmark=mini", "rsc.isolation_probe=true"])
    policy = compose(["strategy=madara", "benchmark=mini", "router.policy=isolation"])
    assert cell_from_cfg(base).key == cell_from_cfg(spelled).key
    assert identify_probe(base, 6).key == identify_probe(spelled, 6).key
    assert identify_probe(on, 6).key == identify_probe(policy, 6).key != identify_probe(base, 6).key
    assert len({cell_from_cfg(c).key for c in (base, on, policy)}) == 3
    # Cells of other strategies never see the router.
    assert cell_from_cfg(compose(["strategy=nf", "router.policy=isolation"])).key == cell_from_cfg(compose(["strategy=nf"])).key


def test_bad_policy_is_one_line(tmp_path):
    r = cli("run", "strategy=madara", "router.policy=oracle", f"results_dir={tmp_path}", timeout=120)
    assert r.returncode == 2 and "router.policy" in r.stderr and "paper" in r.stderr and "Traceback" not in r.stderr


# --- the probe on a scripted engine ----------------------------------------------------------------


class IsolatingBackend:
    """Test double for a context-confused model: given one document it answers right,
    given them all it answers right only for every other question (in the order of
    ``gold``). Scores are read by logprob (all mass on 3), so the probe's scoring runs too."""

    name = "isolating"
    fingerprint = "isolating:v1"
    batch_size = 64

    def __init__(self, gold: dict[str, str]):
        self.gold = gold
        self.requests: list = []

    def chat(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        self.requests.extend(requests)
        out = []
        for r in requests:
            user = r.messages[-1].content
            if user.rstrip().endswith("Answer:"):  # the generator
                question = user.rsplit("Question:", 1)[1].split("\n", 1)[0].strip()
                confused = "[2]" in user and list(self.gold).index(question) % 2 == 0
                out.append(Completion(text="unknown" if confused else self.gold[question], finish_reason="stop"))
            else:  # an assessor (CoT or re-score)
                out.append(Completion(text=json.dumps({"reasoning_steps": ["It names the answer.", "It is relevant."], "confidence": 3, "score": 3})))
        return out

    def next_token_logprobs(self, requests: Sequence[ScoreRequest]) -> list[Completion]:
        self.requests.extend(requests)
        return [Completion(text="", logprobs={c: (0.0 if c == "3" else -30.0) for c in r.candidates}) for r in requests]

    def close(self) -> None:
        pass


def _gold(cfg) -> dict[str, str]:
    from madara_cli.experiment.examples import prepare_probe

    with EnginePool() as pool:
        examples = prepare_probe(cfg, pool, n=6, force=True).examples
    return {ex.question: ex.answers[0] for ex in examples}


def test_probe_records_the_isolation_gain_and_madara_routes_by_it(tmp_path):
    overrides = ["benchmark=mini", f"results_dir={tmp_path}", "rsc.rescoring=logprob", "rsc.isolation_probe=true", "rsc.bootstrap=50"]
    cfg = compose(overrides)
    backend = IsolatingBackend(_gold(cfg))
    pool = EnginePool(factory=lambda c: backend)
    record, path, reused = ensure_probe(cfg, pool, 6)
    iso = record.isolation
    assert iso is not None and iso.strategy == "pde_random" and iso.n == 6
    assert iso.em_nf == pytest.approx(100.0 * record.em_nf)
    assert (iso.b, iso.c) == (3, 0) and iso.gain == pytest.approx(50.0) and iso.em_iso == pytest.approx(100.0)
    assert iso.p_value == pytest.approx(sps.binomtest(min(iso.b, iso.c), iso.b + iso.c, 0.5).pvalue)
    assert iso.requests == 6 * iso.top_k  # k single-document answers per calibration query
    assert record.accounting["by_stage"]["pde-extract"]["requests"] == iso.requests
    saved = json.loads(path.read_text())
    assert saved["isolation"]["gain"] == pytest.approx(iso.gain) and saved["isolation"]["route"] == iso.route
    # A probe without it writes no isolation section, as before.
    plain, plain_path, _ = ensure_probe(compose([o for o in overrides if "isolation" not in o]), pool, 6)
    assert plain.isolation is None and "isolation" not in json.loads(plain_path.read_text())

    # strategy=madara honours router.policy, reusing the probe (same key).
    cell = compose([*(o for o in overrides if "isolation_probe" not in o), "router.policy=isolation", "strategy=madara", "limit=2", "benchmark.calibration=6", "strategy.scoring=logprob"])
    res = run_cell(cell, pool)
    assert res.metrics["madara"]["probe_reused"]
    assert res.metrics["madara"]["route"] == iso.route and res.metrics["madara"]["policy"] == "isolation"
    assert math.isclose(res.metrics["madara"]["isolation_gain"], iso.gain)


def test_isolation_policy_on_a_probe_without_it_is_one_line(tmp_path):
    """strategy.probe pins a probe that never measured isolation: refuse, do not guess."""
    overrides = ["benchmark=mini", f"results_dir={tmp_path}", "rsc.rescoring=logprob", "rsc.bootstrap=50"]
    cfg = compose(overrides)
    backend = IsolatingBackend(_gold(cfg))
    pool = EnginePool(factory=lambda c: backend)
    _, path, _ = ensure_probe(cfg, pool, 6)
    cell = compose([*overrides, "router.policy=isolation", "strategy=madara", f"strategy.probe={path}", "limit=2", "strategy.scoring=logprob"])
    from madara_cli.core.errors import ConfigError

    with pytest.raises(ConfigError, match="rsc.isolation_probe=true"):
        run_cell(cell, pool)


@pytest.mark.llm
def test_isolation_probe_on_cpu(tmp_path):
    """SmolLM2 on the mini benchmark: `madara probe rsc.isolation_probe=true` records Δ_iso and its p-value."""
    args = ["probe", "--n", "3", f"results_dir={tmp_path}", "generation.cot_max_tokens=64", "rsc.rescoring=logprob", "rsc.isolation_probe=true"]
    r = cli(*args, timeout=1500)
    assert r.returncode == 0, r.stderr
    assert "Δ_iso" in r.stdout and "McNemar" in r.stdout and "router.policy=isolation" in r.stdout
    (path,) = list(tmp_path.glob("probes/*/probe.json"))
    iso = json.loads(path.read_text())["isolation"]
    assert iso["n"] == 3 and 0.0 <= iso["p_value"] <= 1.0 and iso["b"] + iso["c"] <= 3
    assert iso["route"] in {"pde", "sda", "cot", "atf"}


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
def test_plan_counts_the_isolation_probe_calls(tmp_path):
    """`madara plan` walks a madara cell's probe; the isolation arm adds k calls per calibration query."""
    from madara_cli.experiment.plan import plan_grid

    def calls(*extra):
        cfg = compose(["strategy=madara", "benchmark=mini", "limit=2", "benchmark.calibration=4", "strategy.scoring=logprob",
                       "rsc.rescoring=logprob", f"results_dir={tmp_path}", *extra])
        total = plan_grid("adhoc", [cfg]).total()
        return total.requests, total.calls

    (req_on, calls_on), (req_off, calls_off) = calls("rsc.isolation_probe=true"), calls()
    assert req_on - req_off == 4 * 5  # 4 calibration queries x k=5 single-document answers
    assert 0 < calls_on - calls_off <= 4 * 5  # some coincide with the routed PDE's answers, shared through the cache


ISOLATION_SECTION = {"strategy": "pde_random", "top_k": 5, "em_nf": 14.0, "em_iso": 40.0, "gain": 26.0, "n": 100, "b": 30, "c": 4,
                     "p_value": 1.2e-5, "test": "exact McNemar, two-sided", "source": "probe", "requests": 500, "route": "pde", "reason": "r"}


def test_report_and_table4_show_the_isolation_gain_beside_rho(tmp_path):
    pytest.importorskip("matplotlib")
    from madara_cli.tables.builders.probe_diagnostics import table4
    from madara_cli.tables.report import write_report
    from tests.results_fixtures import write_probe

    root = tmp_path / "results"
    write_probe(root, "mistral-7b", "conflicts")
    before = table4(root)
    assert "Δ_iso (ours)" not in before.columns  # no isolation probe: the table is as it always was
    write_probe(root, "llama-3.1-8b", "conflicts", isolation=ISOLATION_SECTION)
    after = table4(root)
    assert list(after.columns) == [*before.columns, "Δ_iso (ours)"]
    llama = after[after["Model"] == "Llama-3.1-8B"].iloc[0]
    assert llama["Δ_iso (ours)"] == "+26.0 (p=1.2e-05)"
    text = write_report(root).path.read_text(encoding="utf-8")
    assert "Δ_iso (p)" in text and "+26.0 (1.2e-05; b/c 30/4)" in text and "route (isolation policy)" in text
