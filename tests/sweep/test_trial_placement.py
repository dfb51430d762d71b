"""A sweep's trial on a multi-node cluster: its driver's bundle lands on the head node, where the sweep's MLflow
server (bound to the head's loopback in cluster/*.yaml) and Tune's folder are, and the head's CPUs bound how many
trials run at once. The cluster runs in a subprocess, tests/sweep/trial_placement_script.py."""

from __future__ import annotations

import json
from pathlib import Path

from raysim.testing.cluster_script import cluster_script_result

SCRIPT = Path(__file__).with_name("trial_placement_script.py")
LAYERS = [{"resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}}]


def test_a_trials_driver_runs_on_the_head_node_and_the_heads_cpus_bound_the_trials_at_once():
    result, _ = cluster_script_result(SCRIPT, json.dumps(LAYERS), timeout_s=180)
    driver, _ = result["bundles"]
    assert driver == result["head"]  # PACK alone puts the whole 1.5-CPU group on the 2-CPU worker node
    # 3 CPUs host two 1.5-CPU trials, but the head's 1 CPU holds one driver
    assert result["planned"] == 1
    assert result["two_refused"] == (
        "--max-concurrent 2 trials need 2 x 1.5 CPU, and the head node hosts 1 trial drivers (1 CPUs, one a trial); "
        "use --max-concurrent 1 or fewer"
    )
