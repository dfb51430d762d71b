"""A sweep's trial on a multi-node cluster: its driver's bundle lands on the head node, where the sweep's MLflow
server (bound to the head's loopback in cluster/*.yaml) and Tune's folder are, and the head's CPUs bound how many
trials run at once. The cluster runs in a subprocess, tests/sweep/trial_placement_script.py: this process may
already hold the session's Ray, and a process can hold only one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("trial_placement_script.py")
LAYERS = [{"resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}}]
TIMEOUT_S = 180


def placed_on_cluster() -> dict:
    ray_tmp = tempfile.mkdtemp(prefix="rs-", dir="/tmp")  # short unix socket paths, an address file of its own
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), json.dumps(LAYERS)],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the placement took over {TIMEOUT_S} s:\n{err[-4000:]}")
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert process.returncode == 0, err[-4000:]
    (line,) = [line for line in out.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def test_a_trials_driver_runs_on_the_head_node_and_the_heads_cpus_bound_the_trials_at_once():
    result = placed_on_cluster()
    driver, worker = result["bundles"]
    assert driver == result["head"]  # PACK alone puts the whole 1.5-CPU group on the 2-CPU worker node
    assert worker in (result["head"], result["worker_node"])
    # 3 CPUs host two 1.5-CPU trials, but the head's 1 CPU holds one driver
    assert result["planned"] == 1
    assert result["two_refused"] == (
        "--max-concurrent 2 trials need 2 x 1.5 CPU, and the head node hosts 1 trial drivers (1 CPUs, one a trial); "
        "use --max-concurrent 1 or fewer"
    )
