"""Experiment tracking against the real packages: ``logger=mlflow`` (a local file store,
read back with ``mlflow.search_runs``) and ``logger=wandb`` (offline mode, read back from
the run folder wandb writes). The cells run on the shared fake engine; one ``llm`` test
runs the real command on the embedded model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from madara_cli.composition import compose
from madara_cli.core.errors import ConfigError
from madara_cli.experiment.engines import EnginePool
from madara_cli.experiment.grid import cell_from_cfg
from madara_cli.experiment.runner import run_cell
from tests.conftest import have
from tests.fakes import FakeBackend, cli, free_port, one_line_error


def _run(results: Path, *overrides: str):
    cfg = compose(["limit=2", f"results_dir={results}", *overrides])
    with EnginePool(factory=lambda c: FakeBackend()) as pool:
        return cfg, run_cell(cfg, pool)


def test_logger_is_not_part_of_the_cell_key():
    base = cell_from_cfg(compose(["limit=2", "strategy=pde"])).key
    for logger in ("logger=mlflow", "logger=wandb", "logger=none"):
        assert cell_from_cfg(compose(["limit=2", "strategy=pde", logger])).key == base


def test_logger_settings_are_checked_at_compose():
    with pytest.raises(ConfigError, match="unknown logger 'tensorboard'; valid loggers: mlflow, none, wandb"):
        compose(["logger=tensorboard"])
    with pytest.raises(ConfigError, match="logger.artifacts"):
        compose(["logger=mlflow", "logger.artifacts=maybe"])


def _search(store: Path, experiment: str = "madara"):
    import mlflow

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 reads its file store only with this switch (README)

    mlflow.set_tracking_uri(store.resolve().as_uri())
    return mlflow.search_runs(experiment_names=[experiment])


def test_mlflow_logs_each_cell_once_with_settings_metrics_and_artifacts(results_dir):
    pytest.importorskip("mlflow")
    _, nf = _run(results_dir, "strategy=nf", "logger=mlflow")
    _, pde = _run(results_dir, "strategy=pde", "strategy.top_k=3", "logger=mlflow")
    runs = _search(results_dir / "mlruns")
    assert len(runs) == 2
    row = runs[runs["tags.madara_key"] == pde.cell.key].iloc[0]
    assert row["params.strategy.top_k"] == "3" and row["params.strategy.name"] == "pde" and row["params.model.name"] == "smollm2-135m"
    assert row["metrics.em"] == pytest.approx(pde.record.em) and row["metrics.n"] == 2
    assert row["metrics.accounting.requests"] == pde.record.accounting["requests"] and "metrics.timing.wall_seconds" in runs
    assert row["status"] == "FINISHED" and row["tags.mlflow.runName"] == pde.cell.key
    # The cell folder is attached: the run's artifacts hold its metrics.json as written.
    from mlflow.tracking import MlflowClient

    client = MlflowClient((results_dir / "mlruns").resolve().as_uri())
    names = {a.path for a in client.list_artifacts(row["run_id"])}
    assert {"metrics.json", "predictions.jsonl", "config.yaml"} <= names
    # Reading the finished cells back (a rerun of the same command) logs nothing new.
    _, again = _run(results_dir, "strategy=pde", "strategy.top_k=3", "logger=mlflow")
    assert again.skipped and len(_search(results_dir / "mlruns")) == 2
    # force=true recomputes the cell: its run is replaced, not doubled.
    _run(results_dir, "strategy=nf", "logger=mlflow", "force=true")
    runs = _search(results_dir / "mlruns")
    assert len(runs) == 2 and (runs["tags.madara_key"] == nf.cell.key).sum() == 1


def test_mlflow_logs_a_cell_finished_before_tracking_was_on(results_dir):
    pytest.importorskip("mlflow")
    _run(results_dir, "strategy=nf")
    assert not (results_dir / "mlruns").exists()
    _, r = _run(results_dir, "strategy=nf", "logger=mlflow", "logger.experiment=later", "logger.artifacts=false")
    runs = _search(results_dir / "mlruns", "later")
    assert r.skipped and list(runs["tags.madara_key"]) == [r.cell.key]


def test_mlflow_uri_names_another_store(results_dir, tmp_path):
    pytest.importorskip("mlflow")
    elsewhere = tmp_path / "store"
    _run(results_dir, "strategy=nf", "logger=mlflow", f"logger.uri={elsewhere.resolve().as_uri()}")
    assert not (results_dir / "mlruns").exists() and len(_search(elsewhere)) == 1


def _wandb_runs(folder: Path) -> list[Path]:
    return sorted((folder / "wandb").glob("offline-run-*"))


def _wandb_records(run_dir: Path) -> dict[str, dict]:
    """The config and summary of an offline run, from the ``run-*.wandb`` file wandb sync
    uploads: a LevelDB-style log (32 KiB blocks; 7-byte record headers: CRC, length, type)
    of wandb's own protobuf ``Record`` messages after a 7-byte ``:W&B`` header."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out: dict[str, dict] = {"config": {}, "summary": {}}
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            which = record.WhichOneof("record_type")
            items = record.run.config.update if which == "run" else getattr(record, which).update if which in ("config", "summary") else []
            target = out["summary" if which == "summary" else "config"]
            for item in items:
                if item.key:
                    target[item.key] = json.loads(item.value_json)
    return out


def test_wandb_offline_logs_each_cell_once(results_dir, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    _, r = _run(results_dir, "strategy=pde", "strategy.top_k=3", "logger=wandb")
    runs = _wandb_runs(results_dir)
    assert len(runs) == 1 and os.environ["WANDB_MODE"] == "offline"
    got = _wandb_records(runs[0])
    assert got["config"]["madara_key"] == r.cell.key and got["config"]["strategy.top_k"] == 3 and got["config"]["strategy.name"] == "pde"
    assert got["summary"]["em"] == pytest.approx(r.record.em) and got["summary"]["n"] == 2
    assert got["summary"]["accounting.requests"] == r.record.accounting["requests"]
    _run(results_dir, "strategy=pde", "strategy.top_k=3", "logger=wandb")
    assert _wandb_runs(results_dir) == runs


def test_a_missing_tracker_is_one_line(tmp_path):
    """With the extra absent, the cell is still written and the error names the install."""
    if have("mlflow"):
        pytest.skip("mlflow is installed")
    res = cli("run", "--cfg", "job", "logger=mlflow", timeout=120)
    assert res.returncode == 0  # composing is fine; the tracker is needed only once a cell finishes
    from madara_cli.core.errors import TrackingError
    from madara_cli.results.tracking import tracker

    with pytest.raises(TrackingError, match=r"pip install 'madara\[tracking\]'"):
        tracker(compose([f"results_dir={tmp_path}", "logger=mlflow"]))


# --------------------------------------------------------------------------- #
# Preflight: a tracker that cannot be used is one line before the first cell


@pytest.mark.parametrize("logger,needle", [("mlflow", "logger=mlflow needs mlflow"), ("wandb", "logger=wandb needs wandb")])
def test_a_missing_tracker_package_stops_the_run_before_any_engine(monkeypatch, capsys, no_engine, tmp_path, logger, needle):
    import sys

    for name in (logger, f"{logger}.tracking"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it raises ImportError
    results = tmp_path / "r"
    code, _, err = cli("run", f"logger={logger}", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, needle, "pip install 'madara[tracking]'")
    assert not results.exists()


def test_an_unwritable_mlflow_store_stops_the_run_before_any_engine(monkeypatch, capsys, no_engine, tmp_path):
    pytest.importorskip("mlflow")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store's folder would go")
    results = tmp_path / "r"
    code, _, err = cli("run", "logger=mlflow", f"logger.uri={(blocker / 'mlruns').as_uri()}", "limit=1",
                               f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "the MLflow store", str(blocker / "mlruns"), "cannot be written")
    assert not results.exists()


@pytest.mark.parametrize("logger", ["mlflow", "wandb"])
def test_the_preflight_leaves_nothing_behind_when_the_run_then_fails(monkeypatch, capsys, no_engine, tmp_path, logger):
    """The store is checked, not made: a run whose first cell fails on its data leaves the
    results folder as it found it (the tracker makes its store when a cell finishes)."""
    pytest.importorskip(logger)
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"question": "q?", "answers": ["a"]}\n{"question": "q?", "answers": ["a"], "x": ' + "[" * 100_000 + "}\n")
    results = tmp_path / "r"
    code, _, err = cli("run", f"logger={logger}", "benchmark=jsonl", f"benchmark.path={bench}",
                               "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "bench.jsonl:2")
    assert not results.exists()


def test_an_unwritable_wandb_folder_stops_the_run_before_any_engine(monkeypatch, capsys, no_engine, tmp_path):
    pytest.importorskip("wandb")
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    code, _, err = cli("run", "logger=wandb", f"logger.dir={blocker / 'w'}", "limit=1",
                               f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "the W&B offline folder", "cannot be written")


def test_an_unreachable_mlflow_server_stops_the_run_within_seconds(monkeypatch, capsys, no_engine, tmp_path):
    """A closed port on loopback: refused at once, never MLflow's minutes of retries."""
    import time

    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{free_port()}"
    results = tmp_path / "r"
    t0 = time.monotonic()
    code, _, err = cli("run", "logger=mlflow", f"logger.uri={uri}", "limit=1", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "the MLflow server", uri, "cannot be reached")
    assert time.monotonic() - t0 < 20 and not results.exists()
    code, _, err = cli("probe", "logger=mlflow", f"logger.uri={uri}", f"results_dir={results}", monkeypatch=monkeypatch, capsys=capsys)
    one_line_error(code, err, "cannot be reached")


def test_a_quote_in_a_key_never_enters_a_filter_string(tmp_path):
    """Runs are found by key through a map of the experiment's runs; a key holding ' (once
    MLflow's "Invalid clause(s) in filter string") is found like any other."""
    pytest.importorskip("mlflow")
    from madara_cli.results.tracking import MLflowTracker, Run

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    uri = (tmp_path / "mlruns").resolve().as_uri()
    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "metrics.json").write_text("{}")
    run = Run("cell", "it's__a__key' OR '1'='1", folder, {"a": 1}, {"em": 0.5}, {"model": "m"})
    t = MLflowTracker(uri, "madara", artifacts=False)
    assert t.find(run.key) == []
    assert t.log(run) and not t.log(run)  # the second finds the first
    again = MLflowTracker(uri, "madara", artifacts=False)  # a fresh map, read from the store
    assert [r.data.tags["madara_key"] for r in again.find(run.key)] == [run.key]
    assert again.find("it's__a__key") == []
    assert again.log(run, replace=True) and len(MLflowTracker(uri, "madara", artifacts=False).find(run.key)) == 1


@pytest.mark.llm
def test_madara_run_logger_mlflow_on_the_embedded_model(tmp_path):
    """The issue's check: `madara run logger=mlflow limit=1`, then mlflow.search_runs."""
    pytest.importorskip("mlflow")
    results = tmp_path / "results"
    res = cli("run", "logger=mlflow", "limit=1", f"results_dir={results}", "backend.n_threads=1")
    assert res.returncode == 0, res.stderr
    runs = _search(results / "mlruns")
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["params.strategy.name"] == "nf" and row["params.limit"] == "1" and row["params.backend.name"] == "llamacpp"
    assert row["metrics.em"] in (0.0, 1.0) and row["metrics.accounting.calls_issued"] >= 1


def test_ls_lists_the_loggers():
    res = cli("ls", "loggers", timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "loggers: mlflow, none, wandb"
