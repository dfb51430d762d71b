"""Surviving failures: a client worker SIGKILLed mid-round is restarted by Ray and its tasks re-run; a killed
coordinator is replaced by the driver from the last checkpoint. Either way the run ends with the numbers of a
run without failures."""

from __future__ import annotations

import io
import threading

import pytest
from mlflow import MlflowClient
from rich.console import Console

from raysim.config import build_config
from raysim.engine.callbacks import Callback
from raysim.engine.driver import run
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing import chaos

BASE = {
    "federation": {"clients": 8, "rounds": 4, "participation": 1.0, "seed": 5, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "dirichlet"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"workers": 2, "cpus_per_client": 0.5},
}


class After(Callback):
    """Calls ``act(round)`` after each round, in the driver."""

    def __init__(self, act):
        self.act = act

    def after_round(self, round, report) -> bool:
        self.act(round)
        return False


def quiet(config, act=None):
    return run(config, show_progress=False, console=Console(file=io.StringIO()), callbacks=[After(act)] if act else [])


def kill_when_busy(killed: list, class_name: str, *methods: str) -> threading.Thread:
    """A started thread that SIGKILLs a ``class_name`` actor once it runs one of ``methods`` and appends its pid
    (None if none was busy within 30 s) to ``killed``."""
    thread = threading.Thread(target=lambda: killed.append(chaos.kill_busy_actor(class_name, methods)))
    thread.start()
    return thread


def metrics_of(result):
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in result.history]


def config_for(tracking_uri, tmp_path, backend="ray", **checkpoint):
    layers = [
        BASE,
        {
            "resources": {"backend": backend},
            "checkpoint": {"dir": str(tmp_path / backend), **checkpoint},
            "tracking": {"tracking_uri": tracking_uri},
        },
    ]
    return build_config("fedprox", layers)


@pytest.fixture(scope="module")
def clean(ray_session, tmp_path_factory):
    """FedProx's metrics without failures, which both FedProx tests must end with."""
    folder = tmp_path_factory.mktemp("clean")
    return metrics_of(quiet(config_for(f"sqlite:///{folder / 'mlflow.db'}", folder, backend="sequential")))


def test_worker_killed_mid_round_is_replaced_and_the_round_rerun(clean, tracking_uri, tmp_path):
    killed, threads = [], []

    def kill_soon(round):  # the next round starts right after this returns: kill a worker while it trains
        if round in (1, 3):
            threads.append(kill_when_busy(killed, "ClientWorker", "train"))

    survived = quiet(config_for(tracking_uri, tmp_path), kill_soon)
    for thread in threads:
        thread.join()
    assert len(killed) == 2 and None not in killed
    assert metrics_of(survived) == clean
    assert not set(killed) & set(chaos.actor_pids("ClientWorker"))  # (the pool is gone; no stale pid lives on)


def test_killed_coordinator_is_recovered_from_the_last_checkpoint(clean, tracking_uri, tmp_path):
    """Checkpoints every 2 rounds, one kept: round 3 is lost and replayed from round 2's, and reaches the driver's
    callbacks (MLflow's, the test's) once. The driver prunes, once a round's report is in its hands: when round 4's
    report arrives, round 2's checkpoint is still there, so a coordinator dying after writing round 4's, before its
    report came back, would still find it."""
    killed, seen = [], {}

    def kill_after_round_3(round):
        assert round not in seen, f"round {round} reached the callbacks twice"  # the replayed round 3 did not
        seen[round] = sorted(path.name for path in (tmp_path / "ray").glob("*/round-*"))
        if round == 3 and not killed:
            killed.append(chaos.kill_actor("Coordinator"))

    recovered = quiet(config_for(tracking_uri, tmp_path, every=2, keep=1), kill_after_round_3)
    assert killed and killed[0] is not None
    assert metrics_of(recovered) == clean
    logged = MlflowClient(tracking_uri).get_metric_history(recovered.run_id, "global_acc")
    assert sorted(point.step for point in logged) == [1, 2, 3, 4]  # one point a round, the replayed one's included
    assert seen[4] == ["round-000002", "round-000004"]
    assert sorted(path.name for path in (tmp_path / "ray").glob("*/round-*")) == ["round-000004"]


def test_killed_split_server_is_recovered_from_the_last_checkpoint(ray_session, tracking_uri, tmp_path):
    """FedVZ's encoder lives in the server actor (``ray::EncoderServer``): killed mid-round, the workers' requests fail,
    the driver restarts coordinator and server from the last checkpoint (which holds the encoder) and the run ends as
    if nothing had happened."""

    def split_config(backend, **checkpoint):
        layers = [
            BASE,
            {
                "federation": {"rounds": 3},  # killed in round 3, which reruns from round 2's checkpoint
                "resources": {"backend": backend},
                "checkpoint": {"dir": str(tmp_path / backend), **checkpoint},
                "tracking": {"tracking_uri": tracking_uri},
                "fedvz": {"fedround": 2, "lr_server": 1e-2},
            },
        ]
        return build_config("fedvz", layers)

    clean = quiet(split_config("sequential"))
    killed, threads = [], []

    def kill_soon(round):  # in round 3, while the server answers a client's step
        if round == 2 and not killed:
            threads.append(kill_when_busy(killed, "EncoderServer", "forward", "backward", "perturbed"))

    recovered = quiet(split_config("ray", every=2), kill_soon)
    for thread in threads:
        thread.join()
    assert killed and killed[0] is not None
    assert metrics_of(recovered) == metrics_of(clean)


def test_a_worker_lost_behind_the_coordinator_is_named_with_its_own_error(ray_session):
    """A worker that cannot start (its constructor's error) reaches the driver through the coordinator's wait as
    SimulationLost naming the lost worker and that error, not as the coordinator's death."""
    import ray

    from raysim.actors.proxy import ActorProxy
    from raysim.base.errors import SimulationLost

    @ray.remote(num_cpus=0)
    class Worker:
        def __init__(self):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

        def ready(self):
            return True

    @ray.remote(num_cpus=0)
    class Waiter:
        def begin(self, workers):
            ray.get([worker.ready.remote() for worker in workers])

    waiter = Waiter.remote()
    try:
        with pytest.raises(SimulationLost, match=r"lost a worker or service .*RuntimeError: CUDA out of memory"):
            ActorProxy(waiter, "the coordinator").begin([Worker.remote()])
    finally:
        ray.kill(waiter)
