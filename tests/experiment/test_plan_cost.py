"""`madara plan`'s honest cost (issue 36): one cell as well as a grid, a table whole at 100
columns, --json and --csv, engine time priced by prompt tokens and output budgets at a
calibration the plan names (measured here, madara bench, or a labelled prior)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from madara_cli.backends.cache import ResponseCache
from madara_cli.composition import compose
from madara_cli.core.records import Completion
from madara_cli.experiment import engine_time
from madara_cli.experiment.engine_time import Rates, fit_rates
from madara_cli.experiment.plan import plan_grid
from tests.fakes import cli

# A served engine whose fingerprint needs no model file: the hub id and revision.
QWEN = ("model=qwen2.5-7b", "backend=vllm", "benchmark=mini")


def test_one_cell_is_planned_without_a_grid(tmp_path, monkeypatch, capsys):
    code, out, err = cli("plan", "--results", str(tmp_path), *QWEN, "strategy=three_agent", "limit=2",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "plan: one cell" in out and "strategy=three_agent" in out
    row = next(line for line in out.splitlines() if line.startswith("three_agent"))
    assert row.split()[1:3] == ["1", "44"]  # 1 cell, 2 queries x (21 scores + 1 answer)


def test_a_sweep_needs_multirun_as_run_does(tmp_path, monkeypatch, capsys):
    code, _, err = cli("plan", "--results", str(tmp_path), *QWEN, "strategy=nf,pde", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "-m/--multirun" in err
    code, out, err = cli("plan", "-m", "--json", "--results", str(tmp_path), *QWEN, "strategy=nf,pde", "limit=1",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert [r["strategy"] for r in json.loads(out)["strategies"]] == ["nf", "pde"]


def test_json_holds_every_number_and_the_calibration(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_time, "gpu_name", lambda: None)
    code, out, err = cli("plan", "--json", "--results", str(tmp_path), *QWEN, "strategy=pde", "limit=2",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"plan", "grid", "cells", "strategies", "total", "calibrations", "notes"}
    (row,) = data["strategies"]
    assert row["strategy"] == "pde" and row["cells"] == 1 and row["requests"] == data["total"]["requests"] > 0
    assert row["calls"] == row["uncached"] > 0 and row["est_seconds"] > 0 and row["est_timed_calls"] == row["calls"]
    (cal,) = data["calibrations"]
    # Nothing measured here: a prior, said to be one, for vLLM on the GPU it assumed, with its source.
    assert cal["source"] == "prior" and cal["basis"].startswith("a prior, not measured here: vLLM on 1xH100-80GB")
    assert "no GPU seen here: assumed one H100" in cal["basis"] and "LambdaLabsML/vllm-benchmark" in cal["basis"]
    assert cal["decode_tokens_per_s"] == pytest.approx(3281.0 * 7.25 / 7, rel=1e-3)  # scaled to the 7B model


def test_csv_is_one_row_per_strategy_and_the_total(tmp_path, monkeypatch, capsys):
    from madara_cli.commands.plan_output import FIELDS

    code, out, err = cli("plan", "--csv", "-m", "--results", str(tmp_path), *QWEN, "strategy=nf,three_agent", "limit=1",
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    table = list(csv.DictReader(io.StringIO(out)))
    assert tuple(table[0]) == FIELDS and [r["strategy"] for r in table] == ["nf", "three_agent", "total"]
    assert int(table[-1]["requests"]) == int(table[0]["requests"]) + int(table[1]["requests"])
    code, _, err = cli("plan", "--csv", "--json", *QWEN, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and "pick one" in err


def test_the_table_is_whole_at_100_columns_also_when_piped(tmp_path):
    """Every strategy of demo-full, in a child process whose output is piped and whose
    terminal would be 100 columns wide: no line longer, nothing cut with an ellipsis."""
    r = cli("plan", "--grid", "demo-full", "--results", str(tmp_path), "model=qwen2.5-7b", "backend=vllm", "limit=1",
            env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "…" not in r.stdout
    for name in ("self_consistency", "pde_uniform", "three_agent", "main_rag", "total"):
        assert any(line.split()[:1] == [name] for line in lines), name


def test_a_plan_rests_on_rates_measured_in_the_cache_and_says_so(tmp_path):
    """Completions of this engine in the response cache, timed as seconds = 0.02 + prompt
    tokens / 2,000 + output tokens / 40: the plan's fit finds those rates, names them as
    measured here, and prices the uncached calls with them."""
    cfg = compose([*QWEN, "strategy=nf", "limit=2", f"results_dir={tmp_path}"])
    before = plan_grid("adhoc", [cfg])
    assert before.calibrations[0].source == "prior"
    from madara_cli.experiment.plan import _fingerprint

    fp = _fingerprint(cfg)
    cache = ResponseCache(cfg.cache)
    rows = [(f"k{i}", Completion(text="x", tokens_in=tin, tokens_out=tout, seconds=0.02 + tin / 2000 + tout / 40))
            for i, (tin, tout) in enumerate([(500, 10), (1500, 3), (800, 30), (2500, 0), (300, 60), (1200, 12)])]
    cache.put_many(fp, "chat", rows)
    cache.put_many("another-engine", "chat", [("x", Completion(text="x", tokens_in=10, tokens_out=10, seconds=99.0))])
    cache.close()
    after = plan_grid("adhoc", [cfg])
    (cal,) = after.calibrations
    assert cal.source == "measured" and cal.calls == 6 and "measured here over 6 calls" in cal.describe()
    r = cal.rates
    assert (r.prefill_s, r.decode_s, r.call_s) == pytest.approx((1 / 2000, 1 / 40, 0.02), rel=1e-6)
    nf = after.by_strategy["nf"]
    # 2 answers, nothing seen of their replies yet: each at its whole budget (32 tokens), chars / 4 prompt tokens
    expected = cal.rates.seconds(2, nf.prompt_tokens, 2 * 32)
    assert nf.seconds == pytest.approx(expected, rel=0.01) and nf.timed_calls == 2


def test_cached_replies_of_the_plans_own_requests_teach_it_their_length(tmp_path):
    """After a calibration run of one query, the plan of two queries finds the first
    query's requests in the cache: their replies (here 5 tokens of a 32-token answer
    budget) price the second query's output, not the whole budget."""
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.runner import run_cell
    from tests.fakes import FakeBackend

    class Timed(FakeBackend):
        def chat(self, requests):
            return [Completion(text=c.text, tokens_in=400, tokens_out=5, seconds=0.5) for c in super().chat(requests)]

    one = compose([*QWEN, "strategy=nf", "limit=1", f"results_dir={tmp_path}"])
    from madara_cli.experiment.plan import _fingerprint

    engine = Timed()
    engine.__class__.fingerprint = property(lambda self: _fingerprint(one))  # type: ignore[method-assign]
    with EnginePool(factory=lambda cfg: engine) as pool:
        run_cell(one, pool)
    two = compose([*QWEN, "strategy=nf", "limit=2", f"results_dir={tmp_path}"])
    plan = plan_grid("adhoc", [two])
    (cal,) = plan.calibrations
    nf = plan.by_strategy["nf"]
    assert (nf.calls, nf.cached) == (2, 1) and cal.observed.replies == 1
    assert cal.observed.fill(32) == pytest.approx(5 / 32) and cal.observed.chars_per_token() < 10
    assert "16% of 32 (from 1 cached replies)" in cal.describe()


def test_the_fit_keeps_every_rate_at_or_above_zero():
    """Seconds that fall with output tokens (noise) do not make a negative decode rate:
    the best fit with the terms whose coefficients stay >= 0 is kept."""
    rows = [(1000, 0, 1.0), (2000, 0, 2.0), (1000, 50, 0.9), (2000, 50, 1.9), (1500, 20, 1.45)]
    sums = {"n": len(rows)}
    for name, f in (("x", lambda x, z, y: x), ("z", lambda x, z, y: z), ("y", lambda x, z, y: y), ("xx", lambda x, z, y: x * x),
                    ("zz", lambda x, z, y: z * z), ("xz", lambda x, z, y: x * z), ("xy", lambda x, z, y: x * y),
                    ("zy", lambda x, z, y: z * y), ("yy", lambda x, z, y: y * y)):
        sums[name] = float(sum(f(*r) for r in rows))
    rates = fit_rates(sums)
    assert rates is not None and rates.decode_s == 0.0 and rates.prefill_s > 0 and rates.call_s >= 0
    assert fit_rates({**sums, "n": 2}) is None  # too few to trust over a prior


def test_a_served_model_without_measurements_has_no_prior(tmp_path):
    cfg = compose(["backend=openai", "strategy=nf", "limit=1", "benchmark=mini", f"results_dir={tmp_path}"])
    plan = plan_grid("adhoc", [cfg])
    (cal,) = plan.calibrations
    assert cal.source == "none" and plan.total().timed_calls == 0 and "no prior for backend openai" in cal.describe()


def test_the_bench_figures_calibrate_an_engine_nothing_ran_on(tmp_path):
    cfg = compose([*QWEN, "strategy=nf", "limit=1", f"results_dir={tmp_path}"])
    from madara_cli.experiment.plan import _fingerprint

    (tmp_path / "bench").mkdir(parents=True)
    timed = {"seconds_per_prompt_token": 0.0001, "seconds_per_output_token": 0.01}
    (tmp_path / "bench" / "vllm.json").write_text(json.dumps({"overhead": {
        "fingerprint": _fingerprint(cfg), "requests": 18, "prefix_caching_on": timed, "prefix_caching_off": timed}}))
    (cal,) = plan_grid("adhoc", [cfg]).calibrations
    assert cal.source == "bench" and cal.rates == Rates(prefill_s=0.0001, decode_s=0.01)
    assert "from madara bench --only vllm (18 requests" in cal.describe()


def test_finished_cells_show_the_engine_and_wall_time_they_recorded(tmp_path, monkeypatch, capsys):
    """A finished cell's engine seconds live in its record's timing section
    (timing.engine_seconds): the plan's "finished cells, as measured" shows them, and its
    wall time beside them."""
    from madara_cli.experiment.engines import EnginePool
    from madara_cli.experiment.plan import _fingerprint
    from madara_cli.experiment.runner import run_cell
    from tests.fakes import FakeBackend

    cfg = compose([*QWEN, "strategy=nf", "limit=2", f"results_dir={tmp_path}"])

    class Timed(FakeBackend):
        fingerprint = property(lambda self: _fingerprint(cfg))

        def chat(self, requests):
            return [Completion(text=c.text, tokens_in=400, tokens_out=5, seconds=37.5) for c in super().chat(requests)]

    with EnginePool(factory=lambda c: Timed()) as pool:
        done = run_cell(cfg, pool)
    assert done.record.engine_seconds == 75.0
    nf = plan_grid("adhoc", [cfg]).by_strategy["nf"]
    assert (nf.measured_seconds, nf.measured_wall_seconds) == (75.0, pytest.approx(done.record.seconds))
    code, out, err = cli("plan", "--results", str(tmp_path), *QWEN, "strategy=nf", "limit=2", env={"COLUMNS": "100"},
                         monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    head, row = [ln.split() for ln in out.split("finished cells, as measured")[1].splitlines() if ln.strip()][:3:2]
    assert head[-4:] == ["engine", "time", "wall", "time"] and row[:5] == ["nf", "1", "2", "2", "1m15s"]


def test_each_kind_of_request_is_priced_by_its_own_fit_and_a_kind_timed_too_little_by_the_prior_at_the_speed_measured(tmp_path):
    """Generation and score requests run different code in an engine: fitted apart, each
    prices its own kind (a fit over both misprices each); a kind with too few timed
    completions takes the prior's rates times how much slower than the prior this machine
    ran the rest."""
    from madara_cli.experiment.engine_time import calibrate
    from madara_cli.experiment.plan import _fingerprint

    cfg = compose(["strategy=nf", "limit=1", f"results_dir={tmp_path}"])  # llama.cpp: a prior exists
    fp = _fingerprint(cfg)
    cache = ResponseCache(cfg.cache)
    chat = [(f"c{i}", Completion(text="x", tokens_in=tin, tokens_out=tout, seconds=0.1 + tin / 500 + tout / 20))
            for i, (tin, tout) in enumerate([(300, 10), (600, 40), (450, 5), (900, 60)])]
    score = [(f"s{i}", Completion(text="", tokens_in=tin, tokens_out=0, seconds=tin / 1000)) for i, tin in enumerate([300, 500, 800])]
    cache.put_many(fp, "chat", chat)
    cache.put_many(fp, "score", score)
    cal = calibrate(cfg, fp, cache)
    chat_rates, score_rates = cal.by_kind["chat"], cal.by_kind["score"]
    assert (chat_rates.prefill_s, chat_rates.decode_s, chat_rates.call_s) == pytest.approx((1 / 500, 1 / 20, 0.1), rel=1e-6)
    assert score_rates.prefill_s == pytest.approx(1 / 1000, rel=1e-6) and score_rates.call_s == pytest.approx(0, abs=1e-9)
    assert cal.seconds("score", 1, 2, 4 * 1400) == pytest.approx(1400 / 1000, rel=1e-3)  # two of 700 tokens; 4 characters a token
    assert "generation: prefill 500 tok/s, decode 20 tok/s, 0.10 s a call; scores: prefill 1,000 tok/s" in cal.describe()
    fresh = ResponseCache(tmp_path / "other.sqlite")
    fresh.put_many(fp, "chat", chat)  # no score timed here: the prior's score rates, as slow as this machine ran the chats
    cal = calibrate(cfg, fp, fresh)
    prior = engine_time.prior_for(cfg)[0].rates(float(cfg.model.params_b))
    factor = sum(c.seconds for _, c in chat) / sum(prior.seconds(1, c.tokens_in, c.tokens_out) for _, c in chat)
    assert cal.by_kind["score"].prefill_s == pytest.approx(prior.prefill_s * factor, rel=1e-6)
    assert f"scores: too few timed here, the prior at the speed measured (x{factor:.2g} its time)" in cal.basis
    cache.close()
    fresh.close()
