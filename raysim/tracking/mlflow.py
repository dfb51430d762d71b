"""MLflow tracking: one run per simulation (params, tags, the data set as an input, per-round metrics, artifacts).

The default store is a SQLite file under ``./raysim-runs`` with artifacts beside it; ``--tracking-uri``
points anywhere MLflow can (``http://127.0.0.1:5000`` for a server, which a cluster needs). A run's summary
figures are ``summary/<metric>_<stat>`` (one ``/``: MLflow's charts group them in a section of their own); runs
logged before were ``summary.<metric>.<stat>``, and :func:`summary_key` reads both.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import sqlite3
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlflow.entities import DatasetInput, Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.store.db.db_types import DATABASE_ENGINES
from mlflow.tracking import MlflowClient

from raysim.base.errors import ConfigError
from raysim.base.paths import sqlite_file, unwritable, why_not_a_file

PARAM_LIMIT = 500  # MLflow caps a param value's length
SUMMARY = "summary/"
SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file
MLFLOW_TABLES = {"alembic_version", "experiments"}  # one of them in a store MLflow made, even half made
KIND, SWEEP = "raysim.kind", "sweep"  # a sweep's parent run is tagged KIND=SWEEP; its trials are nested under it
TRAINABLE = "trainable_params"  # every run logs the size of its global trainable state once, at step 0
RACE_TRIES = 3  # a concurrent run added the same row first: look again (see looked_up_again)
T = TypeVar("T")
COMPARE = "comparison"  # a comparison's own run (KIND=COMPARE); its (method, seed) runs are nested under it
ATTACK = "attack"  # an attack's run (KIND=ATTACK, raysim.attack=its name), nested under the run it attacked
EXPERIMENT_KIND = "mlflow.experimentKind"  # what MLflow's UI takes an experiment for; raysim's are classic ML
MACHINE_LEARNING = "custom_model_development"


def summary_metrics(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """``{metric: {stat: value}}`` as MLflow metrics: ``summary/global_acc_final``, ``summary/global_acc_mean``."""
    return {f"{SUMMARY}{key}_{stat}": value for key, stats in summary.items() for stat, value in stats.items()}


def summary_key(name: str) -> tuple[str, str] | None:
    """(metric, stat) of a summary metric's name, new (``summary/global_acc_mean``) or old
    (``summary.global_acc.mean``); None for any other metric."""
    if name.startswith(SUMMARY) and "_" in name:
        key, stat = name[len(SUMMARY) :].rsplit("_", 1)
        return key, stat
    if name.startswith("summary.") and name.count(".") == 2:
        _, key, stat = name.split(".")
        return key, stat
    return None


def param_value(value: Any) -> str:
    """A param as ``--set`` takes it (tuples as ``[0, 1]``), cut to MLflow's limit."""
    return str(list(value) if isinstance(value, tuple) else value)[:PARAM_LIMIT]


def store_schemes() -> set[str]:
    """The URI schemes MLflow has a tracking store for: its registry's (plugins' included), or its own built-in
    ones where a release keeps the registry elsewhere."""
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    registered = getattr(_tracking_store_registry, "_registry", None)
    return set(registered) if registered else {"http", "https", "file", "databricks", *DATABASE_ENGINES}


def check_store(uri: str, experiment: str | None = None) -> None:
    """Fail early, with one line, if the store cannot be used, or its ``experiment`` is deleted; creates nothing.

    A SQLite file must be creatable (its nearest existing folder writable), and an existing one an MLflow store of
    this MLflow's schema; a server must answer ``/health``; a plain folder is refused as MLflow 3 does, unless
    MLFLOW_ALLOW_FILE_STORE is set. The experiment is looked up in an existing SQLite store or a server.
    """
    path = sqlite_file(uri)
    server = uri.startswith(("http://", "https://"))
    if path is not None:
        blocked = path if path.exists() and not (path.is_file() and os.access(path, os.W_OK)) else None
        blocked = blocked or (None if path.exists() else unwritable(path.parent))
        if blocked is not None:
            raise ConfigError(
                f"tracking store {uri} is not writable (cannot create files in {blocked}); "
                "pass --tracking-uri sqlite:///SOME/WRITABLE/DIR/mlflow.db"
            )
        refuse_not_sqlite(uri, path)
    elif server:
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).close()
        except OSError as error:
            raise ConfigError(
                f"MLflow server {uri} does not answer ({getattr(error, 'reason', error)}); start it with "
                "'mlflow server --host 127.0.0.1 --port 5000' or pass another --tracking-uri"
            ) from None
    elif "://" in uri and uri.split("://", 1)[0].split("+", 1)[0].lower() not in store_schemes():
        raise ConfigError(
            f"tracking store {uri!r}: MLflow has no store for {uri.split('://', 1)[0]}://; pass --tracking-uri "
            "sqlite:///PATH/mlflow.db, an MLflow server's http(s)://HOST:PORT, or a database's (postgresql://...)"
        )
    elif ("://" not in uri or uri.startswith("file:")) and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        raise ConfigError(
            f"tracking store {uri!r} is a plain folder, which MLflow 3 refuses; pass "
            "--tracking-uri sqlite:///PATH/mlflow.db (or set MLFLOW_ALLOW_FILE_STORE=1)"
        )
    existing = server or (path is not None and path.is_file() and path.stat().st_size > 0)
    if experiment is not None and existing:
        live_experiment(store_client(uri), uri, experiment)


def refuse_not_sqlite(uri: str, path: Path) -> None:
    """A one-line error where the store's file holds something else than a SQLite database (an empty file is a new
    one, as SQLite takes it), or another program's database (MLflow would add its tables to it); read only."""
    if not (path.is_file() and path.stat().st_size):
        return
    with path.open("rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ConfigError(
                f"tracking store {uri}: {path} is not a SQLite database; pass --tracking-uri with an MLflow store's "
                "SQLite file, or a new one"
            )
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as database:
            tables = {name for (name,) in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:  # busy or damaged: MLflow's own error says which
        return
    if tables and not tables & MLFLOW_TABLES:
        raise ConfigError(
            f"tracking store {uri}: {path} is a SQLite database of another program (its tables: "
            f"{', '.join(sorted(tables)[:5])}), not an MLflow store; pass --tracking-uri with an MLflow store's "
            "SQLite file, or a new one"
        )


def live_experiment(client: MlflowClient, uri: str, name: str):
    """Experiment ``name`` of the store (None where there is none), refused in one line where it is deleted: MLflow
    keeps a deleted experiment's name, so no run can be logged to it and no new one can take the name."""
    found = client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage == "deleted":
        raise ConfigError(
            f"experiment {name!r} is deleted in the MLflow store {uri}; restore it (MLFLOW_TRACKING_URI={uri} mlflow "
            f"experiments restore --experiment-id {found.experiment_id}) or pass another --experiment"
        )
    return found


def rounds_reported(uri: str, run_id: str) -> int:
    """The last round whose report run ``run_id`` logged (each round logs ``round_time_s`` at its step; 0: none)."""
    return max((m.step for m in store_client(uri).get_metric_history(run_id, "round_time_s")), default=0)


def store_client(uri: str) -> MlflowClient:
    """An MLflow client of the store ``uri``, whose tables exist (:func:`created`)."""
    created(uri)
    return MlflowClient(tracking_uri=uri)


@functools.cache
def created(uri: str) -> None:
    """Creates the tables of a new SQLite store, once per process and one process at a time: MLflow creates them
    in the first process that opens a new store, and runs started together in a new folder would each begin to
    create them (and break the store's migrations for all but one). A lock file beside the store (``mlflow.db.lock``)
    serialises that first opening across processes; the later ones find the tables made. An existing store in a
    folder that cannot hold the lock is read as it is. Other stores (a server) are their own. The kernel releases the
    ``flock`` when its holder ends, however it ends."""
    path = sqlite_file(uri)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(f"{path}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the process creating the tables
            opened(uri)
    except OSError as error:  # an existing store in a folder this user cannot write, or on a read-only disk: as it is
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or not path.is_file():
            raise
        opened(uri)


def opened(uri: str) -> None:
    """Opens the store as MLflow does (creating the tables of a new one); a store of another MLflow's schema is
    refused in one line, with MLflow's advice."""
    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except MlflowException as error:
        said = " ".join(str(error.message).split()).split(" NOTE:")[0]
        raise ConfigError(f"tracking store {uri}: {said}") from None


def check_run_store(uri: str, whose: str = "") -> None:
    """Fail with one line, creating nothing, when a store to read from cannot be read: a SQLite file that does not
    exist, a server that does not answer (within seconds, where MLflow's client retries for minutes) or a plain
    folder (:func:`check_store`)."""
    store = sqlite_file(uri)
    if store is None:
        check_store(uri)
    elif not store.is_file():
        raise ConfigError(
            f"the MLflow store {uri}{whose} {why_not_a_file(store)}; pass --tracking-uri of an existing store"
        )
    else:
        refuse_not_sqlite(uri, store)
        if store.stat().st_size:
            created(uri)  # an MLflow store's tables exist: this creates nothing, and checks the schema


def check_run(uri: str, run_id: str) -> None:
    """Fail with one line, creating nothing, unless ``run_id`` is a run in the store ``uri`` (``--resume``)."""
    check_run_store(uri, " of the checkpoint")
    try:
        run = store_client(uri).get_run(run_id)
    except MlflowException:
        raise ConfigError(f"MLflow run {run_id} of the checkpoint is not in the store {uri}") from None
    if run.info.lifecycle_stage == "deleted":
        raise ConfigError(
            f"MLflow run {run_id} of the checkpoint is deleted in the store {uri}; restore it "
            f"(MLFLOW_TRACKING_URI={uri} mlflow runs restore --run-id {run_id}) to resume it"
        )


def literal(value: str) -> str:
    """``value`` as a string in an MLflow search filter: single-quoted, or double-quoted where it holds a single
    quote (an experiment named ``bob's``)."""
    return f'"{value}"' if "'" in value else f"'{value}'"


def end_running(
    uri: str, experiment: str, tag: str, value: str, own_run: str | None = None, failed_since: float | None = None
) -> None:
    """Mark KILLED the runs of ``experiment`` still RUNNING with tag ``tag`` = ``value`` (a stopped sweep's trials, a
    stopped comparison's cells: their processes were killed before their runs could end), all but ``own_run``; and
    those that ended FAILED at or after ``failed_since`` (epoch seconds: the stop, which they did not outlive)."""
    client = store_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return
    queries = [f"attributes.status = 'RUNNING' and tags.`{tag}` = {literal(value)}"]
    if failed_since is not None:
        since = int(failed_since * 1000)
        queries.append(
            f"attributes.status = 'FAILED' and attributes.end_time >= {since} and tags.`{tag}` = {literal(value)}"
        )
    for query in queries:
        for run in every_run(client, found.experiment_id, query):
            if run.info.run_id != own_run:
                client.set_terminated(run.info.run_id, status="KILLED")


def every_run(client: MlflowClient, experiment_id: str, query: str, page_size: int = 1000) -> list:
    """Every run of the experiment that ``query`` finds, page by page (one search returns at most 1,000)."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=query, max_results=page_size, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def _artifact_root(uri: str) -> str | None:
    store = sqlite_file(uri)
    return (store.parent / "artifacts").resolve().as_uri() if store is not None else None


def _duplicate_key(error: MlflowException) -> bool:
    """Whether the store refused a row because another writer added the same key first (SQLite, PostgreSQL, MySQL)."""
    message = str(error).lower()
    return "unique constraint" in message or "duplicate entry" in message


def looked_up_again(look_up_or_add: Callable[[], T]) -> T:
    """``look_up_or_add()``, repeated when it lost a race. Runs started at once (a comparison's cells, a sweep's
    trials, runs launched together) look the same experiment or data set up, find nothing and add it; the slower
    insert breaks the store's unique key, its transaction is rolled back whole, and looking up again finds the row
    the faster run added."""
    for _ in range(RACE_TRIES - 1):
        try:
            return look_up_or_add()
        except MlflowException as error:
            if not _duplicate_key(error):
                raise
    return look_up_or_add()


def import_store(uri: str) -> None:
    """Import the modules MLflow opens the store ``uri`` with (for SQLite: SQLAlchemy, Alembic and MLflow's SQL store,
    about 1 s on 2 cores), creating nothing: a run does it while its set-up waits for the model's build, so that
    opening the store, once the input was found good, costs only the store's own work."""
    if uri.startswith("sqlite:"):
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


class Tracker:
    """A thin layer over an MLflow client for one run; every call names the run explicitly."""

    def __init__(self, uri: str, run_id: str | None = None):
        """``run_id``: an existing run to log to (a sweep's own run), else one :meth:`start` creates."""
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.uri = uri
        self.run_id = run_id

    @functools.cached_property
    def client(self) -> MlflowClient:
        """The store's client, opened (and the store created) on first use: after the input was found good."""
        return store_client(self.uri)

    def experiment_id(self, name: str) -> str:
        """The experiment ``name``, created if missing (artifacts beside a SQLite store) and marked classic ML."""
        return looked_up_again(lambda: self._experiment_id(name))

    def _experiment_id(self, name: str) -> str:
        found = live_experiment(self.client, self.uri, name)
        if found is None:
            return self.client.create_experiment(
                name, artifact_location=_artifact_root(self.uri), tags={EXPERIMENT_KIND: MACHINE_LEARNING}
            )
        if EXPERIMENT_KIND not in found.tags:
            self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, MACHINE_LEARNING)
        return found.experiment_id

    def start(
        self,
        experiment: str,
        run_name: str,
        params: dict[str, Any],
        tags: dict[str, str],
        dataset: DatasetInput | None = None,
    ) -> str:
        """A new run in ``experiment`` with the resolved config as params (and its data set as an input)."""
        run = self.client.create_run(self.experiment_id(experiment), run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        items = [Param(k, param_value(v)) for k, v in sorted(params.items())]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])
        if dataset is not None:
            self.log_dataset(dataset)
        return self.run_id

    def log_dataset(self, dataset: DatasetInput) -> None:
        """Links the run to its data set (MLflow adds the data set's row if no run added it before)."""
        looked_up_again(lambda: self.client.log_inputs(self.run_id, datasets=[dataset]))

    def attach(self, run_id: str) -> None:
        """Continue an existing run (``--resume``): it is RUNNING again until :meth:`end`."""
        self.run_id = run_id
        self.client.update_run(run_id, status="RUNNING")

    def set_tags(self, tags: dict[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), folder)

    def log_bytes(self, data: bytes, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(data)
            self.log_artifact(path)

    def log_text(self, text: str, name: str) -> None:
        self.log_bytes(text.encode(), name)

    def log_json(self, data: Any, name: str) -> None:
        self.log_text(json.dumps(data, indent=2, sort_keys=True), name)

    def end(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status=status)
