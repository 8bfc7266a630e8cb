"""Experiment tracking (``logger=mlflow`` / ``logger=wandb``, extra ``tracking``).

Each finished cell and probe is one run: settings as parameters, every number it records
as metrics, identity as tags, its folder as artifacts. The results folder stays the record:
a run is looked up by key before one is logged (a rerun logs nothing new; a cell finished
before tracking was on is logged when read back), ``force=true`` replaces its run, and
``logger`` is in no key. MLflow writes to ``results/mlruns`` unless ``logger.uri`` names a
store; W&B runs offline under ``results/wandb/`` (``wandb sync`` uploads later).

:func:`preflight` checks each tracker before any engine starts, so an unusable one is one
line at the start, not after an hour. Runs are found in a key map read once per tracker,
never through a filter string (a ``'`` in a value broke MLflow's filter parser).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from madara_cli.core.credentials import redact
from madara_cli.core.errors import TrackingError

log = logging.getLogger(__name__)

SERVER_TIMEOUT_S = 3.0
KEY_TAG = "madara_key"
KIND_TAG = "madara_kind"
# Sections that are identity or text, not measurements.
_NOT_MEASURED = ("cell", "settings", "provenance", "schema_version", "path")


def flat_numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """Every finite number of a record by dotted name; lists are left to the artifacts."""
    import math

    out: dict[str, float] = {}

    def walk(d: Mapping[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if not prefix and k in _NOT_MEASURED:
                continue
            name = f"{prefix}{k}"
            if isinstance(v, Mapping):
                walk(v, name + ".")
            elif isinstance(v, bool):
                out[name] = float(v)
            elif isinstance(v, (int, float)) and math.isfinite(float(v)):
                out[name] = float(v)

    walk(record, "")
    return out


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


class Run:
    """What one run carries (the same for both trackers)."""

    def __init__(self, kind: str, key: str, folder: Path, params: Mapping[str, Any], metrics: Mapping[str, float],
                 tags: Mapping[str, str], started: str | None = None, ended: str | None = None):
        self.kind, self.key, self.folder = kind, key, Path(folder)
        # a URL's user info (backend.base_url's password) is never tracked
        self.values = {k: redact(v) if isinstance(v, str) else v for k, v in params.items()}  # as typed (W&B keeps numbers and lists)
        self.params = {k: redact(_text(v)) for k, v in params.items()}  # as text (MLflow's parameters are strings)
        self.metrics = dict(metrics)
        self.tags = {k: redact(str(v)) for k, v in tags.items() if v is not None}
        self.started, self.ended = started, ended


def cell_run(folder: Path, record: Any) -> Run:
    """A finished cell (:class:`~madara_cli.results.outputs.CellRecord`) as a run."""
    from madara_cli.results.summary import cell_settings

    cell = record.cell.to_dict()
    params = {**{k: v for k, v in cell.items() if k != "key"}, **cell_settings(record, folder)}
    prov = record.provenance or {}
    tags = {"grid": record.grid, "model": record.model, "benchmark": record.benchmark, "strategy": record.strategy,
            "madara_version": prov.get("madara_version"), "git_commit": prov.get("git_commit")}
    return Run("cell", record.key, folder, params, flat_numbers(record.to_dict()), tags, prov.get("started"), prov.get("ended"))


def probe_run(folder: Path, record: Any, cfg: Any) -> Run:
    """A finished probe (:class:`~madara_cli.results.outputs.ProbeRecord`) as a run, the probed configuration its parameters."""
    from madara_cli.config import to_plain

    plain = to_plain(cfg)
    params: dict[str, Any] = {"n": record.n}
    for group in ("model", "backend", "benchmark", "retriever", "generation", "rsc"):
        for k, v in (plain.get(group) or {}).items():
            params[f"{group}.{k}"] = v
    data = record.to_dict()
    prov = data.get("provenance") or {}
    tags = {"grid": "probes", "model": record.model, "benchmark": record.benchmark, "route": str(record.route),
            "rsc_class": str(record.rsc_class), "madara_version": prov.get("madara_version")}
    return Run("probe", Path(folder).name, folder, params, flat_numbers(data), tags, prov.get("started"), prov.get("ended"))


def _ms(iso: str | None) -> int | None:
    if not iso:
        return None
    import datetime as dt

    try:
        return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The trackers' deprecation notes and info logs are theirs, not the run's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class MLflowTracker:
    def __init__(self, uri: str, experiment: str, artifacts: bool = True):
        try:
            with _quiet():
                from mlflow.tracking import MlflowClient
        except ImportError:
            raise TrackingError("logger=mlflow needs MLflow: pip install 'madara[tracking]' (or pip install mlflow)") from None
        self.uri, self.artifacts = uri, artifacts
        with _quiet():
            self.client = MlflowClient(tracking_uri=uri)
            try:
                exp = self.client.get_experiment_by_name(experiment)
                self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
            except Exception as e:  # an unreachable server, a store that is not one
                raise TrackingError(f"cannot use the MLflow store {uri}: {' '.join(str(e).split())[:300]}") from None

    def _by_key(self) -> dict[str, list[Any]]:
        """key -> runs of this experiment, read once page by page and kept up to date by :meth:`log`."""
        if getattr(self, "_runs", None) is None:
            runs: dict[str, list[Any]] = {}
            token = None
            with _quiet():
                while True:
                    page = self.client.search_runs([self.experiment_id], max_results=1000, page_token=token)
                    for r in page:
                        key = r.data.tags.get(KEY_TAG)
                        if key is not None:
                            runs.setdefault(key, []).append(r)
                    token = page.token
                    if not token:
                        break
            self._runs = runs
        return self._runs

    def find(self, key: str) -> list[Any]:
        return list(self._by_key().get(key, []))

    def log(self, run: Run, replace: bool = False) -> bool:
        from mlflow.entities import Metric, Param

        with _quiet():
            existing = self.find(run.key)
            finished = [r for r in existing if r.info.status == "FINISHED"]
            if finished and not replace:
                return False
            for r in existing:  # a run cut short earlier, or the one a forced rerun replaces
                self.client.delete_run(r.info.run_id)
            self._by_key()[run.key] = []
            tags = {**run.tags, KEY_TAG: run.key, KIND_TAG: run.kind, "mlflow.runName": run.key}
            created = self.client.create_run(self.experiment_id, start_time=_ms(run.started), tags=tags)
            rid = created.info.run_id
            try:
                stamp = _ms(run.ended) or _ms(run.started) or 0
                params = [Param(k[:250], v[:6000]) for k, v in run.params.items()]
                metrics = [Metric(k[:250], v, stamp, 0) for k, v in run.metrics.items()]
                for i in range(0, max(len(params), len(metrics)), 100):  # the store's batch limits
                    self.client.log_batch(rid, metrics=metrics[i:i + 100], params=params[i:i + 100])
                if self.artifacts:
                    self.client.log_artifacts(rid, str(run.folder))
            except BaseException:
                self.client.set_terminated(rid, status="FAILED")
                raise
            self.client.set_terminated(rid, status="FINISHED", end_time=_ms(run.ended))
            self._by_key()[run.key] = [self.client.get_run(rid)]
        return True


def wandb_run_id(key: str) -> str:
    """A W&B run id fixed by the key (ids are short and may not hold the key's characters)."""
    return "m" + hashlib.sha256(key.encode()).hexdigest()[:20]


class WandbTracker:
    def __init__(self, directory: Path, project: str, artifacts: bool = True):
        """Runs go to ``directory/wandb/offline-run-*`` (W&B adds the ``wandb`` folder)."""
        try:
            with _quiet():
                import wandb
        except ImportError:
            raise TrackingError("logger=wandb needs wandb: pip install 'madara[tracking]' (or pip install wandb)") from None
        self.wandb = wandb
        self.dir, self.project, self.artifacts = Path(directory), project, artifacts

    def find(self, key: str) -> list[Path]:
        return sorted((self.dir / "wandb").glob(f"offline-run-*-{wandb_run_id(key)}"))

    def log(self, run: Run, replace: bool = False) -> bool:
        import shutil

        existing = self.find(run.key)
        if existing and not replace:
            return False
        for old in existing:
            shutil.rmtree(old, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.environ["WANDB_MODE"] = "offline"  # never the network, even for a child process wandb starts
        os.environ.setdefault("WANDB_SILENT", "true")  # its notes would break the one-line-per-step log
        wandb = self.wandb
        with _quiet():
            w = wandb.init(
                project=self.project, dir=str(self.dir), id=wandb_run_id(run.key), name=run.key, mode="offline",
                config={**run.values, KEY_TAG: run.key, KIND_TAG: run.kind}, tags=[run.kind],
                notes=json.dumps(run.tags), reinit="create_new", settings=wandb.Settings(silent=True, console="off"),
            )
            try:
                w.summary.update(run.metrics)
                if self.artifacts:
                    art = wandb.Artifact(f"{run.kind}-{wandb_run_id(run.key)}", type=run.kind, metadata={KEY_TAG: run.key})
                    art.add_dir(str(run.folder))
                    w.log_artifact(art)
            finally:
                w.finish()
        return True


def tracker(cfg: Any):
    """The tracker ``cfg.logger`` names, or None for ``logger=none``."""
    lg = cfg.get("logger") if hasattr(cfg, "get") else None
    name = str(lg.name) if lg is not None else "none"
    if name == "none":
        return None
    results = Path(str(cfg.results_dir))
    if name == "mlflow":
        uri = _store_uri(cfg)
        if uri.startswith("file:"):
            # MLflow 3 hides the file store (no server, no database package) behind this switch.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return MLflowTracker(uri, str(lg.experiment), bool(lg.artifacts))
    if name == "wandb":
        if lg.get("uri"):
            raise TrackingError("logger.uri is MLflow's; W&B runs offline under logger.dir (wandb sync uploads them)")
        return WandbTracker(Path(str(lg.dir)) if lg.get("dir") else results, str(lg.experiment), bool(lg.artifacts))
    raise TrackingError(f"unknown logger '{name}'; valid: none, mlflow, wandb")


def _store_uri(cfg: Any) -> str:
    lg = cfg.logger
    return str(lg.uri) if lg.get("uri") else (Path(str(cfg.results_dir)) / "mlruns").resolve().as_uri()


def _writable(folder: Path, what: str) -> None:
    """``folder``, or its nearest existing parent, takes a new file (left behind: nothing); else one TrackingError."""
    at = folder.resolve()
    while not at.exists() and at != at.parent:
        at = at.parent
    try:
        if not at.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(at))
        probe = at / f".madara-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise TrackingError(f"{what} {folder} cannot be written ({e.strerror or e}); point it at a writable folder") from None


def _reachable(uri: str, what: str) -> None:
    """A TCP connect to ``uri``'s host and port within :data:`SERVER_TIMEOUT_S`, or one TrackingError."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(uri)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname or "", port), timeout=SERVER_TIMEOUT_S):
            pass
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise TrackingError(f"{what} {uri} cannot be reached ({reason} within {SERVER_TIMEOUT_S:g} s); start it, or set logger.uri to another store") from None


def _need(package: str, logger: str, install: str) -> None:
    import importlib

    try:
        with _quiet():
            importlib.import_module(package)
    except ImportError:
        raise TrackingError(f"logger={logger} needs {install.split()[-1]}: pip install 'madara[tracking]' (or {install})") from None


def preflight(cfgs: Any) -> None:
    """Check every tracker the configs name before any cell runs (package, writable store, server
    reachable then opened): one TrackingError line for the first that cannot be used."""
    for cfg in cfgs:
        lg = cfg.get("logger") if hasattr(cfg, "get") else None
        name = str(lg.name) if lg is not None else "none"
        if name == "mlflow":
            _need("mlflow.tracking", "mlflow", "pip install mlflow")
            uri = _store_uri(cfg)
            if uri.startswith("file:"):
                from urllib.parse import unquote, urlparse

                _writable(Path(unquote(urlparse(uri).path)), "the MLflow store")
            elif uri.startswith(("http:", "https:")):
                _reachable(uri, "the MLflow server")
                _cached_tracker(cfg)  # the server answers: the experiment is looked up (or made) now
            else:
                _cached_tracker(cfg)  # another store (sqlite:, a database): opened now, its own error in one line
        elif name == "wandb":
            _need("wandb", "wandb", "pip install wandb")
            _writable(Path(str(lg.dir)) if lg.get("dir") else Path(str(cfg.results_dir)), "the W&B offline folder")


_TRACKERS: dict[str, Any] = {}


def _cached_tracker(cfg: Any):
    """One tracker per setting for a whole grid (a client per cell would re-read the store each time)."""
    from madara_cli.config import to_plain

    ident = json.dumps([to_plain(cfg.logger), str(cfg.results_dir)], sort_keys=True, default=str)
    if ident not in _TRACKERS:
        _TRACKERS[ident] = tracker(cfg)
    return _TRACKERS[ident]


def track(cfg: Any, run_of: Any, replace: bool = False) -> bool:
    """Log a finished cell or probe (``run_of``: a :class:`Run`, or a callable called only when
    tracking is on); whether a run was written (False: tracking off, or logged already)."""
    if cfg.get("logger") is None or str(cfg.logger.name) == "none":
        return False
    t = _cached_tracker(cfg)
    run = run_of() if callable(run_of) else run_of
    wrote = t.log(run, replace=replace)
    log.info("%s %s: %s", cfg.logger.name, run.key, "logged" if wrote else "already logged")
    return wrote
