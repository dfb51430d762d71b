"""Runs started together against a store that does not exist yet all open it and are all recorded: MLflow creates a
SQLite store's tables in the first process that opens it, and two processes doing so at once break each other's
migrations unless raysim serialises that first opening (``tracking.mlflow.created``)."""

from __future__ import annotations

import subprocess
import sys

from mlflow.tracking import MlflowClient

STARTS = 4
OPEN_AND_START = """
import pathlib, sys, time
from raysim.tracking.mlflow import Tracker
uri, meeting, seed, starts = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
(meeting / f"ready-{seed}").touch()  # past its imports: the slow part
deadline = time.monotonic() + 120
while len(list(meeting.glob("ready-*"))) < starts:  # a barrier: all leave within a millisecond of the last arrival
    assert time.monotonic() < deadline, "the other processes never came"
    time.sleep(0.001)
tracker = Tracker(uri)
tracker.start("raysim", f"seed-{seed}", {"federation.seed": seed}, {})
tracker.end()
"""


def test_runs_started_together_in_a_new_folder_all_create_and_use_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'raysim-runs' / 'mlflow.db'}"
    (tmp_path / "meeting").mkdir()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_START, uri, str(tmp_path / "meeting"), str(seed), str(STARTS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(STARTS)
    ]
    outcomes = [process.communicate(timeout=180) for process in processes]
    assert [p.returncode for p in processes] == [0] * STARTS, [err[-2000:] for _, err in outcomes]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("raysim").experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"seed-{s}" for s in range(STARTS)]
    assert {r.info.status for r in runs} == {"FINISHED"}
