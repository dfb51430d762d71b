"""Run a raysim simulation on a 3-node local Ray cluster and print one JSON line (used by test_multinode.py).

Usage: python multinode_script.py LAYERS_JSON

The cluster (``ray.cluster_utils.Cluster``, all on this machine, on the node address Ray picks as for any local
``ray.init``): a head raylet with no CPUs (it holds the driver and the zero-CPU Coordinator) and two worker raylets with
1 logical CPU each, so a pool of two 1-CPU ClientWorkers can only be placed one per worker node. The config is
``build_config("fedvpt", LAYERS)`` on the Ray backend, tracked in a SQLite MLflow store in a temporary folder. It runs
the whole run as ``raysim run`` does (:func:`raysim.engine.driver.run`) and prints ``RESULT {json}`` with the per-round
metrics, the pool placement the run recorded in MLflow (its ``raysim.pool.*`` tags and ``pool.json``: each worker's
node and resources), the cluster's node ids and the one-line refusal of a sweep on this head, then shuts the cluster
down.

It runs in its own process (:func:`raysim.testing.cluster_script.cluster_script_result`).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

from raysim.testing.cluster_script import MARKER

STARTED = time.monotonic()


def phase(name: str) -> None:
    """Elapsed time per phase on stderr, which the test shows when it fails."""
    print(f"[multinode {time.monotonic() - STARTED:6.1f} s] {name}", file=sys.stderr, flush=True)


def start_cluster(attempts: int = 2):
    """The head (no CPUs) and two 1-CPU worker raylets; one more try if a raylet fails to start.

    A raylet waits a fixed time (~15-20 s; RAY_agent_register_timeout_ms does not change it in Ray 2.60) for its
    dashboard agent to write its port files, and exits when a very busy machine makes the agent slower than that;
    Node then raises "timed out during startup". The head runs only what the test needs (no dashboard modules,
    autoscaler monitor or log forwarding), so that fewer Python processes compete with the agents.
    """
    from ray.cluster_utils import Cluster

    for attempt in range(1, attempts + 1):
        cluster = Cluster()
        try:
            cluster.add_node(
                num_cpus=0, num_gpus=0, include_dashboard=False, no_monitor=True, include_log_monitor=False
            )
            phase("head node up")
            workers = [cluster.add_node(num_cpus=1, num_gpus=0) for _ in range(2)]
            cluster.wait_for_nodes()
            phase("worker nodes up")
            return cluster, workers
        except Exception as error:
            phase(f"cluster start failed (attempt {attempt}/{attempts}): {error}")
            cluster.shutdown()
            if attempt == attempts:
                raise


def main(layers_json: str) -> None:
    import ray

    from raysim.base.errors import ConfigError
    from raysim.config import build_config
    from raysim.engine.driver import run
    from raysim.sweep.tune import plan_concurrency
    from raysim.tracking.mlflow import store_client

    store = tempfile.mkdtemp(prefix="raysim-multinode-")
    uri = f"sqlite:///{store}/mlflow.db"
    config = build_config("fedvpt", [*json.loads(layers_json), {"tracking": {"tracking_uri": uri}}])
    cluster, workers = start_cluster()
    try:
        ray.init(address=cluster.address, logging_level=logging.WARNING, configure_logging=True)
        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)

        outcome = run(config, show_progress=False)
        phase(f"{config.federation.rounds} rounds done")
        client = store_client(uri)
        placement = json.loads(Path(client.download_artifacts(outcome.run_id, "pool.json", store)).read_text())
        tags = {k: v for k, v in client.get_run(outcome.run_id).data.tags.items() if k.startswith("raysim.pool.")}
        alive = [{"node_id": n["NodeID"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
        try:  # a sweep's trial drivers run on the head node, which has no CPU here
            plan_concurrency(config, None)
            sweep_refused = None
        except ConfigError as error:
            sweep_refused = str(error)
        result = {
            "history": outcome.history,
            "workers": placement,
            "tags": tags,
            "head": cluster.head_node.node_id,
            "worker_nodes": [w.node_id for w in workers],
            "nodes": alive,
            "sweep_refused": sweep_refused,
        }
        print(MARKER + json.dumps(result), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
