"""A run on a multi-node local Ray cluster: the worker pool spreads over the nodes, the run records in MLflow the node
of each worker, and the per-round metrics equal the single-node (sequential backend) run's.

The cluster (head with no CPUs, two worker raylets with 1 logical CPU each, built by ``ray.cluster_utils.Cluster``)
runs in a subprocess, tests/e2e/multinode_script.py (:func:`raysim.testing.cluster_script.cluster_script_result`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raysim.config import build_config
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.cluster_script import cluster_script_result
from raysim.testing.smoke import run_rounds

SCRIPT = Path(__file__).with_name("multinode_script.py")
LAYERS = [
    {
        "federation": {"clients": 8, "rounds": 2, "participation": 0.5, "seed": 1, "eval_every": 1},
        "data": {"dataset": "synthetic", "partition": "iid"},
        "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
        "resources": {"workers": 2, "cpus_per_client": 1},
    }
]
TIMEOUT_S = 240


def run_on_cluster() -> dict:
    """The script's result on a fresh 3-node cluster, its stderr (phase timings) under ``log``."""
    result, err = cluster_script_result(SCRIPT, json.dumps(LAYERS), TIMEOUT_S)
    result["log"] = err
    return result


def sequential_history() -> list[dict]:
    config = build_config("fedvpt", [*LAYERS, {"resources": {"backend": "sequential"}}])
    return [report.metrics for report in run_rounds(config)[1]]


def test_pool_spreads_over_nodes_is_recorded_and_matches_the_single_node_run(ray_session):
    cluster = run_on_cluster()

    # (a) three live nodes; the head has no CPU, so each 1-CPU worker sits alone on one 1-CPU worker node
    nodes = {n["node_id"]: n["resources"] for n in cluster["nodes"]}
    assert set(nodes) == {cluster["head"], *cluster["worker_nodes"]} and len(nodes) == 3, cluster["log"]
    assert nodes[cluster["head"]].get("CPU", 0) == 0
    assert all(nodes[n]["CPU"] == 1 for n in cluster["worker_nodes"])
    workers = cluster["workers"]  # as the run recorded them: pool.json
    assert [w["worker"] for w in workers] == [0, 1]
    assert sorted(w["node_id"] for w in workers) == sorted(cluster["worker_nodes"]), workers
    for worker in workers:
        assert worker["CPU"] == pytest.approx(1.0) and worker.get("GPU", 0) == 0
        assert worker["node_ip"]
    assert cluster["tags"] == {
        "raysim.pool.nodes": "2",
        "raysim.pool.node_ids": ",".join(sorted(cluster["worker_nodes"])),
    }
    # a sweep on this cluster is refused at once: its trials' drivers would wait for a CPU on the head node
    assert cluster["sweep_refused"] == (
        "a trial's driver runs on the head node, beside the sweep's MLflow store and Tune's folder, and the head has "
        "0 CPUs; start the head node with at least 1 CPU (ray start --head --num-cpus N)"
    )

    # (b) the same per-round metrics (timings aside) as the sequential backend in this process
    multinode = cluster["history"]
    single = sequential_history()
    assert len(multinode) == len(single) == 2
    for r, (seq, multi) in enumerate(zip(single, multinode), start=1):
        assert multi.pop("round") == r  # the run's history names its rounds
        assert set(multi) == set(seq), r
        for key in sorted(set(seq) - TIMING_KEYS):
            assert multi[key] == pytest.approx(seq[key], abs=1e-6), (r, key)
    assert {"global_acc", "local_acc", "train_loss", "bytes_up"} <= set(single[0])
    assert multinode[-1]["bytes_up"] > 0
