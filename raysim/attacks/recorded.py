"""What a finished run recorded that an attack replays: in MLflow its configuration (``config.yaml``, which the
driver logs with every new run: the resolved config, its store and pool made concrete), its final global state
(``global_state.safetensors``) and which clients it heard (``participation.safetensors``), both logged when the run
ends; in its last checkpoint the clients' own states (a personalised method's models, written after the last
round)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlflow.exceptions import MlflowException

from raysim.base.errors import ConfigError
from raysim.config import Config, as_recorded, build_config, yaml12
from raysim.core.messages import GlobalState, Tensors, unprefixed
from raysim.tracking.mlflow import check_run_store, store_client
from raysim.tracking.participation import PARTICIPATION, load_participation

CONFIG, FINAL_STATE = "config.yaml", "global_state.safetensors"
PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@contextmanager
def quiet_downloads() -> Iterator[None]:
    """MLflow's download progress bar off (a command's output stays its own lines), as it was after."""
    previous = os.environ.get(PROGRESS_BAR)
    os.environ[PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[PROGRESS_BAR]
        else:
            os.environ[PROGRESS_BAR] = previous


def _artifact(uri: str, run_id: str, name: str, folder: str, hint: str = "") -> Path:
    """Artifact ``name`` of run ``run_id`` downloaded into ``folder``; one line when the run or the file is missing
    (ending with ``hint``, what to do instead)."""
    check_run_store(uri)
    client = store_client(uri)
    try:
        client.get_run(run_id)
    except MlflowException:
        raise ConfigError(f"MLflow run {run_id} is not in the store {uri}; pass --tracking-uri of its store") from None
    try:
        with quiet_downloads():
            return Path(client.download_artifacts(run_id, name, folder))
    except (MlflowException, OSError):
        raise ConfigError(
            f"run {run_id} has no {name} (a run logs its config when it starts, and its final state and participation "
            f"when it finishes){hint}"
        ) from None


def recorded_config(uri: str, run_id: str) -> Config:
    """The configuration run ``run_id`` recorded, on the sequential backend (which gives the same numbers as a pool
    of Ray workers: docs/architecture.md), so that an attack replays it in this process."""
    with tempfile.TemporaryDirectory() as folder:
        layer = yaml12.load(_artifact(uri, run_id, CONFIG, folder).read_text())
    config = build_config(layer["method"], [as_recorded(layer)])
    resources = dataclasses.replace(config.resources, backend="sequential", address=None, workers=1)
    return dataclasses.replace(config, resources=resources)


def final_state(uri: str, run_id: str) -> GlobalState:
    """The global state run ``run_id`` ended with."""
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as folder:
        tensors = load_file(_artifact(uri, run_id, FINAL_STATE, folder))
    return GlobalState(unprefixed(tensors, "params/"), unprefixed(tensors, "server/"))


def contributors(uri: str, run_id: str) -> list[int]:
    """The clients whose updates run ``run_id``'s server used in at least one round, in client order."""
    with tempfile.TemporaryDirectory() as folder:
        path = _artifact(uri, run_id, PARTICIPATION, folder, "; pass --clients to choose the clients")
        return sorted(load_participation(path))


def client_states(uri: str, run_id: str, config: Config) -> dict[int, Tensors]:
    """The clients' states in run ``run_id``'s last checkpoint (under ``checkpoint.dir``, default beside the store)."""
    from raysim.tracking import checkpoint

    folder = config.checkpoint.root(uri) / run_id
    if not checkpoint.rounds_in(folder):
        raise ConfigError(
            f"run {run_id} left no checkpoint in {folder}, where its clients' states are kept after the last round; "
            "attack a run whose checkpoints are kept (checkpoint.keep), or pass --model global"
        )
    return checkpoint.load(folder).client_states
