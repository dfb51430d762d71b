"""An attack's own MLflow run, nested under the run it attacks (MLflow's ``mlflow.parentRunId``), in that run's
experiment and store: its settings as params, its figures as artifacts, its numbers as metrics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from raysim.tracking.mlflow import ATTACK, KIND, Tracker
from raysim.tracking.provenance import provenance_tags


@contextmanager
def attack_run(uri: str, attacked: str, attack: str, params: dict[str, Any]) -> Iterator[Tracker]:
    """A new run of ``attack`` nested under run ``attacked``; FINISHED when the block ends, else FAILED (KILLED on
    Ctrl-C)."""
    tracker = Tracker(uri)
    parent = tracker.client.get_run(attacked)
    experiment = tracker.client.get_experiment(parent.info.experiment_id).name
    tags = {MLFLOW_PARENT_RUN_ID: attacked, KIND: ATTACK, "raysim.attack": attack, **provenance_tags(False)}
    tracker.start(experiment, f"{attack}-{parent.info.run_name}", params, tags)
    status = "FAILED"
    try:
        yield tracker
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.end(status)
