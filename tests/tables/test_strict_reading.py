"""What madara refuses to guess (issue 23, items 7-10): compare pairs only what it
can pair, tables and show read results strictly, sizes that do not exist are said
and clipped in the key, and token counts do not depend on what the cache held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.core.errors import BackendError
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.runner import run_cell
from madara_cli.tables import compare_cells, format_comparison
from tests.fakes import FakeBackend, cli, one_line_error
from tests.results_fixtures import write_cell

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


# --------------------------------------------------------------------------- #
# compare refuses what it cannot pair


def test_compare_refuses_cells_of_different_benchmarks(monkeypatch, capsys, tmp_path):
    a = write_cell(tmp_path, "g", "m", "conflicts", "pde", correct=range(8))
    b = write_cell(tmp_path, "g", "m", "musique", "nf", correct=range(3))  # the same ids q0..q9, other questions
    with pytest.raises(ValueError, match="A ran on benchmark conflicts, B on musique"):
        compare_cells(a, b)
    code, out, err = cli("compare", str(a), str(b), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "cannot be paired")
    assert "McNemar" not in out


def test_compare_refuses_other_questions_under_the_same_ids(tmp_path):
    a = write_cell(tmp_path, "g", "m", "musique", "pde", correct=range(8))
    b = write_cell(tmp_path, "g2", "m", "musique", "nf", predictions=[{"question": f"another question {i}"} for i in range(10)])
    with pytest.raises(ValueError, match=r"10 of 10 shared ids hold different questions .*first: q0"):
        compare_cells(a, b)


def test_compare_refuses_a_duplicate_id(monkeypatch, capsys, tmp_path):
    a = write_cell(tmp_path, "g", "m", "musique", "pde", correct=range(8))
    b = write_cell(tmp_path, "g", "m", "musique", "nf", ids=["q0", "q1", "q1"] + [f"q{i}" for i in range(3, 10)])
    code, _, err = cli("compare", str(a), str(b), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "1 example id(s) occur more than once (q1)", str(b))


def test_compare_refuses_a_half_written_cell(tmp_path):
    a = write_cell(tmp_path, "g", "m", "musique", "pde", correct=range(8))
    b = write_cell(tmp_path, "g", "m", "musique", "nf", correct=range(3))
    (b / "metrics.json").unlink()
    with pytest.raises(ValueError, match="not a finished cell"):
        compare_cells(a, b)


def test_compare_at_two_pairs_gives_the_exact_mcnemar_and_no_interval(monkeypatch, capsys, tmp_path):
    a = write_cell(tmp_path, "g", "m", "musique", "pde", correct=(0, 1), n=2)
    b = write_cell(tmp_path, "g", "m", "musique", "nf", correct=(), n=2)
    r = compare_cells(a, b)
    assert (r["n"], r["b"], r["c"]) == (2, 2, 0)
    assert r["p_mcnemar_exact"] == pytest.approx(0.5)
    assert (r["ci_low"], r["ci_high"], r["p_bootstrap"]) == (None, None, None)
    assert "n = 2 pairs is below 10" in r["no_ci_reason"]
    text = format_comparison(r)
    assert "exact 0.5" in text and "no CI shown" in text and "CI [" not in text and "p = 0" not in text
    code, out, _ = cli("compare", str(a), str(b), "--json", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and json.loads(out)["ci_low"] is None


def test_compare_says_why_a_degenerate_bootstrap_shows_no_interval(tmp_path):
    a = write_cell(tmp_path, "g", "m", "musique", "pde", correct=range(12), n=12)
    b = write_cell(tmp_path, "g", "m", "musique", "nf", correct=(), n=12)
    r = compare_cells(a, b)
    assert r["ci_low"] is None and "every pair differs by the same +100pp" in r["no_ci_reason"]
    assert r["p_mcnemar_exact"] == pytest.approx(2 * 0.5**12)
    c = write_cell(tmp_path, "g", "m", "musique", "atf", correct=range(6), n=12)
    shown = compare_cells(a, c)  # mixed differences: the interval is shown
    assert shown["no_ci_reason"] is None and shown["ci_low"] <= shown["mean_diff"] <= shown["ci_high"]


# --------------------------------------------------------------------------- #
# tables and show read strictly


def _edit_metrics(folder: Path, **values) -> None:
    path = folder / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def _damaged_results(root: Path) -> dict[str, Path]:
    """One good cell and three that are not: half-written, em "high", n null."""
    good = write_cell(root, "table2", "llama-3.1-8b", "conflicts", "nf", correct=range(3))
    half = write_cell(root, "table2", "llama-3.1-8b", "conflicts", "pde", correct=range(9))
    (half / "metrics.json").unlink()
    high = write_cell(root, "table2", "mistral-7b", "conflicts", "nf", correct=range(9))
    _edit_metrics(high, em="high")
    null = write_cell(root, "table2", "mistral-7b", "conflicts", "pde", correct=range(9))
    _edit_metrics(null, n=None)
    return {"good": good, "half": half, "high": high, "null": null}


def test_tables_names_every_unreadable_cell_writes_the_rest_and_exits_1(monkeypatch, capsys, tmp_path):
    cells = _damaged_results(tmp_path)
    code, out, err = cli("tables", "--results", str(tmp_path), "--format", "md,long", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1, err
    line = one_line_error(code, err, "3 result folder(s)", "the tables were written without them")
    assert f"{cells['half']} (has config.yaml, predictions.jsonl but no metrics.json" in line
    assert f"{cells['high']} (metrics.json: em 'high' is not a fraction in [0, 1])" in line
    assert f"{cells['null']} (metrics.json: n None is not a count of queries)" in line
    assert str(cells["good"]) not in line and "more" not in line
    long = (tmp_path / "tables" / "all.long.csv").read_text()
    assert "high" not in long
    table2 = (tmp_path / "tables" / "table2.md").read_text()
    rows = {ln.split(" | ")[0]: ln for ln in table2.splitlines() if "| Conflicts |" in ln}
    assert "| 30.0 / 13.9" in rows["| Llama-3.1-8B"]  # the good cell (EM 3/10) is rendered
    assert "90.0" not in rows["| Mistral-7B-v0.3"] and "| — / 18.1 |" in rows["| Mistral-7B-v0.3"]  # the damaged NF (9/10) is not


def test_many_unreadable_cells_are_counted_with_the_first_few_and_a_pointer_to_show(monkeypatch, capsys, tmp_path):
    for i in range(7):
        cell = write_cell(tmp_path, "g", f"m{i}", "musique", "nf", correct=range(3))
        (cell / "metrics.json").unlink()
    code, _, err = cli("tables", "--results", str(tmp_path), "--only", "table2", "--format", "md", monkeypatch=monkeypatch, capsys=capsys)
    line = one_line_error(code, err, "7 result folder(s)", "and 2 more (madara show FOLDER says what is wrong with each)")
    assert code == 1 and line.count("but no metrics.json") == 5


def test_a_folder_that_cannot_be_listed_is_named(monkeypatch, capsys, tmp_path):
    write_cell(tmp_path, "table2", "llama-3.1-8b", "conflicts", "nf", correct=range(3))
    locked = tmp_path / "table2" / "locked"
    locked.mkdir()
    listdir = Path.iterdir

    def iterdir(self):  # what chmod 000 does to anyone but root (the tests may run as root)
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return listdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    code, _, err = cli("tables", "--results", str(tmp_path), "--only", "table2", "--format", "md", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "1 result folder(s)", f"{locked} (cannot be read (Permission denied))")


def test_show_says_what_is_wrong_with_a_damaged_cell(monkeypatch, capsys, tmp_path):
    cells = _damaged_results(tmp_path)
    code, _, err = cli("show", str(cells["half"]), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "is not a finished cell", "no metrics.json")
    code, _, err = cli("show", cells["high"].name, "--results", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "em 'high' is not a fraction")
    code, out, _ = cli("show", str(cells["good"]), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "llama-3.1-8b" in out


def test_a_results_folder_that_does_not_exist_is_an_error_not_created(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    code, _, err = cli("tables", "--results", str(missing), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, f"no results folder {missing}")
    code, _, err = cli("show", "some-key", "--results", str(missing), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, f"no results folder {missing}")
    assert not (tmp_path / "no").exists()


# --------------------------------------------------------------------------- #
# Typos that used to succeed


def test_cache_merge_of_a_cache_that_does_not_exist(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "cache.sqlite"
    code, _, err = cli("cache", "merge", "--cache", str(missing), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, f"no response cache {missing}")
    assert not (tmp_path / "no").exists()


@pytest.mark.usefixtures("no_engine")
def test_plan_names_a_benchmark_file_that_is_missing(monkeypatch, capsys, tmp_path):
    from tests.conftest import configs_with_grid

    missing = tmp_path / "nope.jsonl"
    env = configs_with_grid(tmp_path, "typo", f"axes:\n  benchmark: [musique]\n  strategy: [nf]\noverrides: [limit=2, benchmark.path={missing}]\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, _, err = cli("plan", "--grid", "typo", "--results", str(tmp_path / "r"), monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "not found", str(missing))


# --------------------------------------------------------------------------- #
# Sizes that do not exist are said, and the key says what ran


def _three_rows(tmp_path: Path) -> Path:
    from tests.fakes import musique_row

    path = tmp_path / "three.jsonl"
    path.write_text("".join(json.dumps(musique_row(f"2hop__{i}")) + "\n" for i in range(3)))
    return path


def _cell_cfg(tmp_path: Path, *extra: str):
    return compose(["benchmark=musique", f"benchmark.path={_three_rows(tmp_path)}", f"results_dir={tmp_path / 'r'}",
                    f"cache={tmp_path / 'c.sqlite'}", *extra])


def _warnings(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]


def test_a_limit_beyond_the_data_is_clipped_in_the_key(tmp_path, capsys):
    from madara_cli.experiment.grid import cell_from_cfg
    from madara_cli.experiment.walk import finished_cell

    big = _cell_cfg(tmp_path, "limit=100000", "benchmark.calibration=2")
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        res = run_cell(big, pool)
    assert "__n3__" in res.folder.name and res.record.n == 3 and res.record.limit == 3
    assert res.folder == cell_from_cfg(_cell_cfg(tmp_path, "limit=3", "benchmark.calibration=2")).folder(tmp_path / "r")
    assert res.record.evaluated_set["limit_requested"] == 100000
    assert [w for w in _warnings(capsys) if "limit=100000 is more than the 3 queries" in w and "keyed n3" in w]
    assert not list((tmp_path / "r").glob("*/*n100000*"))
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:  # asked again either way: read back, not rerun
        assert run_cell(big, pool).skipped and run_cell(_cell_cfg(tmp_path, "limit=3", "benchmark.calibration=2"), pool).skipped
    assert finished_cell(big) is None and finished_cell(big, sized=True).folder == res.folder  # launcher read-back


def test_a_limit_within_the_data_keeps_its_key_and_says_nothing(tmp_path, capsys):
    from madara_cli.experiment.grid import cell_from_cfg

    cfg = _cell_cfg(tmp_path, "limit=2", "benchmark.calibration=2")
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        res = run_cell(cfg, pool)
    assert res.cell.key == cell_from_cfg(cfg).key and "__n2__" in res.cell.key
    assert "limit_requested" not in res.record.evaluated_set and "calibration_requested" not in res.record.evaluated_set
    assert _warnings(capsys) == []


def test_calibration_beyond_the_data_is_clipped_said_and_recorded(tmp_path, capsys):
    from madara_cli.experiment.grid import cell_from_cfg

    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        res = run_cell(_cell_cfg(tmp_path, "limit=2", "benchmark.calibration=50"), pool)
    assert res.record.evaluated_set["calibration"] == 3 and res.record.evaluated_set["calibration_requested"] == 50
    assert res.cell.key == cell_from_cfg(_cell_cfg(tmp_path, "limit=2", "benchmark.calibration=3")).key
    assert [w for w in _warnings(capsys) if "benchmark.calibration=50 is more than benchmark musique holds: clipped to 3" in w]


def test_a_probe_and_a_madara_cell_on_fewer_queries_than_asked_are_keyed_by_what_ran(tmp_path, capsys):
    from madara_cli.experiment.walk import ensure_probe

    cfg = compose(["strategy=madara", "benchmark.n_questions=3", "benchmark.calibration=50", "rsc.rescoring=logprob",
                   "rsc.bootstrap=50", f"results_dir={tmp_path}", f"cache={tmp_path / 'c.sqlite'}"])
    with EnginePool(factory=lambda cfg: FakeBackend()) as pool:
        record, path, reused = ensure_probe(cfg, pool, n=40)
        assert record.n == 3 and path.parent.name.split("__")[2] == "n3" and not reused
        assert [w for w in _warnings(capsys) if "40 calibration queries asked for" in w and "keyed n3" in w]
        cell = run_cell(cfg, pool)  # its calibration is cut to 3 as well: the same probe serves it
    assert cell.metrics["madara"]["probe_reused"] and cell.record.evaluated_set["calibration_requested"] == 50
    assert [p.parent.name for p in tmp_path.glob("probes/*/probe.json")] == [path.parent.name]


def test_reproduce_counts_a_folder_its_tables_could_not_read_as_skipped(monkeypatch, capsys, tmp_path):
    from tests.conftest import configs_with_grid

    env = configs_with_grid(tmp_path, "nodata", "axes:\n  benchmark: [conflicts]\n  strategy: [nf]\noverrides: [limit=2]\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    results = tmp_path / "results"
    half = write_cell(results, "table2", "llama-3.1-8b", "conflicts", "pde", correct=range(3))
    (half / "metrics.json").unlink()
    code, out, _ = cli("reproduce", "--backend", "llamacpp", "--models", "smollm2-135m", "--grids", "nodata",
                          "--results", str(results), env={"COLUMNS": "300"}, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1
    assert f"skipped {half}: left out of the tables: has config.yaml, predictions.jsonl but no metrics.json" in " ".join(out.split())
