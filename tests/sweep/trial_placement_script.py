"""Reserve a sweep trial's placement group on a 2-node local Ray cluster and print one JSON line (used by
test_trial_placement.py).

Usage: python trial_placement_script.py LAYERS_JSON

The cluster (``ray.cluster_utils.Cluster``, all on this machine): a head raylet with 1 CPU and a worker raylet with 2,
so that a trial of a 1.5-CPU placement group (its 1-CPU driver, one 0.5-CPU worker) fits either node whole and
Tune's PACK strategy alone would place all of it on the worker node. It prints ``RESULT {json}``: the node of each
bundle of the placement group Tune reserves for the trial (:func:`raysim.sweep.tune.bundles` through Tune's own
``PlacementGroupFactory``), the head's and the worker node's ids, how many trials :func:`plan_concurrency` plans
and its error for one more.

It runs in its own process (:func:`raysim.testing.cluster_script.cluster_script_result`).
"""

from __future__ import annotations

import json
import logging
import sys

from raysim.testing.cluster_script import MARKER


def main(layers_json: str) -> None:
    import ray
    from ray import tune
    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from raysim.base.errors import ConfigError
    from raysim.config import build_config
    from raysim.sweep.tune import bundles, plan_concurrency

    config = build_config("fedvpt", json.loads(layers_json))
    cluster = Cluster()
    try:
        cluster.add_node(num_cpus=1, num_gpus=0, include_dashboard=False, no_monitor=True, include_log_monitor=False)
        worker = cluster.add_node(num_cpus=2, num_gpus=0)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level=logging.WARNING)
        group = tune.PlacementGroupFactory(bundles(config)).to_placement_group()
        ray.get(group.ready(), timeout=60)
        placed = placement_group_table(group)["bundles_to_node_id"]
        remove_placement_group(group)
        try:
            plan_concurrency(config, 2)
            refusal = None
        except ConfigError as error:
            refusal = str(error)
        result = {
            "bundles": [placed[i] for i in range(len(placed))],
            "head": cluster.head_node.node_id,
            "worker_node": worker.node_id,
            "planned": plan_concurrency(config, None),
            "two_refused": refusal,
        }
        print(MARKER + json.dumps(result), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
