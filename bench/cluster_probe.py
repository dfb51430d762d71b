"""Questions bench/cluster_launch.sh asks the cluster's head node (run there with ``ray exec``).

Usage: python bench/cluster_probe.py COMMAND [ARGS]

- ``nodes N TIMEOUT_S``: wait until the Ray cluster (``address="auto"``) has N live nodes; print their ids.
- ``http URL TIMEOUT_S``: wait until URL answers.
- ``pool URI EXPERIMENT``: the pool placement the experiment's newest run recorded (``raysim.pool.*`` tags and
  ``pool.json``); exits 1 unless its workers ran on two or more nodes.
- ``round URI EXPERIMENT N TIMEOUT_S``: wait until the experiment's newest run has logged round N.
- ``commands CONFIG``: the lines a cloud config runs on its nodes where they differ from onprem.yaml's, one per line,
  to run on a loopback node: its setup commands as they are, and what its ``ray start`` lines run before ``ray start``
  (``ulimit -n 65536`` and the like, each ``;`` made ``&&`` so that a refusal shows), ending in ``true``.
- ``same URI EXPERIMENT_A EXPERIMENT_B``: exits 1 unless the newest finished runs of the two experiments logged the
  same per-round metrics (timings aside, within 1e-6) and the same final summary.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def nodes(count: str, timeout_s: str) -> None:
    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    deadline = time.monotonic() + float(timeout_s)
    while True:
        alive = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        if len(alive) >= int(count) or time.monotonic() > deadline:
            break
        time.sleep(2)
    print("live nodes:", " ".join(alive))
    sys.exit(0 if len(alive) >= int(count) else 1)


def newest_run(client, experiment: str, finished: bool = False):
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    status = " and attributes.status = 'FINISHED'" if finished else ""
    runs = client.search_runs(
        [found.experiment_id], "attributes.run_name != ''" + status, order_by=["attributes.start_time DESC"]
    )
    return runs[0] if runs else None


def http(url: str, timeout_s: str) -> None:
    import urllib.request

    deadline = time.monotonic() + float(timeout_s)
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                print(f"{url}: {answer.status}")
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def pool(uri: str, experiment: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    run = newest_run(client, experiment)
    with tempfile.TemporaryDirectory() as tmp:
        placement = json.loads(Path(client.download_artifacts(run.info.run_id, "pool.json", tmp)).read_text())
    tags = run.data.tags
    print(f"run {run.info.run_id}: raysim.pool.nodes={tags.get('raysim.pool.nodes')}")
    for worker in placement:
        print(f"  worker {worker['worker']}: node {worker['node_id']} ({worker['node_ip']}), CPU {worker.get('CPU')}")
    sys.exit(0 if len({worker["node_id"] for worker in placement}) >= 2 else 1)


def round_logged(uri: str, experiment: str, round: str, timeout_s: str) -> None:
    from mlflow import MlflowClient

    client, deadline = MlflowClient(uri), time.monotonic() + float(timeout_s)
    while time.monotonic() < deadline:
        run = newest_run(client, experiment)
        if run is not None and any(
            m.step >= int(round) for m in client.get_metric_history(run.info.run_id, "train_loss")
        ):
            print(f"run {run.info.run_id} logged round {round}")
            return
        time.sleep(1)
    print(f"no run of {experiment!r} logged round {round} in {timeout_s} s")
    sys.exit(1)


def history(client, run_id: str) -> dict[tuple[str, int], float]:
    """Every metric but the timings, by (name, round); a replayed round keeps its latest value."""
    from raysim.ops.metrics import TIMING_KEYS
    from raysim.tracking.report import latest_by_step

    keys = set(client.get_run(run_id).data.metrics) - TIMING_KEYS
    return {
        (key, step): value
        for key in keys
        for step, value in latest_by_step(client.get_metric_history(run_id, key)).items()
    }


def commands(config: str) -> None:
    import yaml

    cluster = yaml.safe_load(Path(config).read_text())
    onprem = yaml.safe_load((Path(config).parent / "onprem.yaml").read_text())
    keys = ("setup_commands", "head_setup_commands", "worker_setup_commands")
    setup = [line for key in keys for line in cluster.get(key) or []]
    lines = [line for line in setup if line not in (onprem.get("setup_commands") or [])]
    for start in [*cluster["head_start_ray_commands"], *cluster["worker_start_ray_commands"]]:
        if "ray start" in start and start.index("ray start") > 0:
            prefix = start[: start.index("ray start")].strip()
            lines.append(" && ".join(part.strip() for part in prefix.rstrip(";").split(";")) + " true")
    print("\n".join(dict.fromkeys(lines)))


def equal(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=1e-6)


def same(uri: str, experiment_a: str, experiment_b: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    a, b = (newest_run(client, name, finished=True) for name in (experiment_a, experiment_b))
    ha, hb = history(client, a.info.run_id), history(client, b.info.run_id)
    differ = sorted(k for k in ha.keys() | hb.keys() if not equal(ha.get(k), hb.get(k)))
    rounds = max(step for key, step in ha if not key.startswith("summary/"))
    print(f"{a.info.run_id} vs {b.info.run_id}: {len(ha)} values over {rounds} rounds, {len(differ)} differ")
    for key in differ[:10]:
        print(f"  {key}: {ha.get(key)} vs {hb.get(key)}")
    final = {k: v for (k, step), v in ha.items() if step == rounds and k.endswith("_acc")}
    print("  final:", ", ".join(f"{k} {v:.4f}" for k, v in sorted(final.items())))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    QUESTIONS = {"nodes": nodes, "http": http, "commands": commands, "pool": pool, "round": round_logged, "same": same}
    QUESTIONS[sys.argv[1]](*sys.argv[2:])
