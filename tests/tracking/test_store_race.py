"""Runs started together against a store that does not exist yet all open it and are all recorded: MLflow creates a
SQLite store's tables in the first process that opens it, and two processes doing so at once break each other's
migrations unless raysim serialises that first opening (``tracking.mlflow.created``)."""

from __future__ import annotations

import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

STARTS = 4
OPEN_AND_START = """
import sys, time
from raysim.tracking.mlflow import Tracker
uri, at, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3]
time.sleep(max(0.0, at - time.time()))  # every process past its imports, then all at once
print(time.time() - at)  # how late it came: the race is only run when all came in time
tracker = Tracker(uri)
tracker.start("raysim", f"seed-{seed}", {"federation.seed": seed}, {})
tracker.end()
"""


def test_runs_started_together_in_a_new_folder_all_create_and_use_the_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'raysim-runs' / 'mlflow.db'}"
    at = time.time() + 15  # the processes import MLflow (2-4 s each on 2 busy cores) before they meet
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_START, uri, str(at), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(STARTS)
    ]
    outcomes = [process.communicate(timeout=120) for process in processes]
    assert [p.returncode for p in processes] == [0] * STARTS, [err[-2000:] for _, err in outcomes]
    late = [float(out.split()[0]) for out, _ in outcomes]
    assert max(late) < 2.0, f"a process came {max(late):.1f} s late to the start, past the others: raise its delay"
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("raysim").experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"seed-{s}" for s in range(STARTS)]
    assert {r.info.status for r in runs} == {"FINISHED"}
