"""What madara refuses to guess (issue 23, items 7-10): compare pairs only what it
can pair, tables and show read results strictly, sizes that do not exist are said
and clipped in the key, and token counts do not depend on what the cache held."""

from __future__ import annotations

from pathlib import Path

import pytest

from madara_cli.backends.base import BackendError
from madara_cli.config import compose
from madara_cli.experiment.runner import EnginePool, run_cell
from tests.test_bad_input import madara, no_engine, one_line_error  # noqa: F401  (no_engine: a fixture, used by name)
from tests.test_strategies_e2e import FakeBackend

# --------------------------------------------------------------------------- #
# Token accounting independent of the cache


class _DiesAfter(FakeBackend):
    """An engine that fails after ``n`` calls, as a killed run would stop."""

    def __init__(self, n: int):
        super().__init__()
        self.left = n

    def _spend(self, requests):
        if self.left < len(requests):
            raise BackendError("engine went away")
        self.left -= len(requests)

    def chat(self, requests):
        self._spend(requests)
        return super().chat(requests)

    def next_token_logprobs(self, requests):
        self._spend(requests)
        return super().next_token_logprobs(requests)


def _pde(results: Path, *extra: str):
    return compose(["strategy=pde", "strategy.scoring=logprob", "limit=3", f"results_dir={results}",
                    f"cache={results / 'cache.sqlite'}", *extra])


def test_a_resumed_cell_reports_the_tokens_of_a_clean_run(tmp_path):
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        clean = run_cell(_pde(tmp_path / "clean"), pool).record.accounting
    assert clean["calls_issued"] > 20 and clean["tokens_in"] == clean["issued_tokens_in"] > 0

    resumed_dir = tmp_path / "resumed"
    with EnginePool(factory=lambda cfg: _DiesAfter(20)) as pool, pytest.raises(BackendError):
        run_cell(_pde(resumed_dir), pool)  # killed midway: its first completions are in the cache
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        resumed = run_cell(_pde(resumed_dir), pool).record.accounting
    assert 0 < resumed["cache_hits"] and resumed["calls_issued"] < clean["calls_issued"]
    for field in ("requests", "tokens_in", "tokens_out", "truncated"):
        assert resumed[field] == clean[field], field
    assert resumed["issued_tokens_in"] < clean["tokens_in"]
    for stage, stats in clean["by_stage"].items():
        assert resumed["by_stage"][stage]["tokens_in"] == stats["tokens_in"], stage

    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:  # everything cached
        again = run_cell(_pde(resumed_dir, "force=true"), pool).record.accounting
    assert (again["tokens_in"], again["tokens_out"]) == (clean["tokens_in"], clean["tokens_out"])
    assert (again["calls_issued"], again["issued_tokens_in"], again["issued_tokens_out"]) == (0, 0, 0)
