"""``Coordinator``: a Ray actor that owns the global state and drives the worker pool each round."""

from __future__ import annotations

import ray

from raysim.actors.split_server import ServerHandle, SplitServer
from raysim.backends import RayExecutor
from raysim.simulation import Simulation
from raysim.split import split_encoder


def start_split_server(config, num_classes: int, initial_state, num_workers: int):
    """Split learning's ``SplitServer`` actor (serving all workers at once) and the coordinator's handle on it,
    or (None, None) for a method without a server. The actor is owned by the coordinator and dies with it."""
    encoder, _ = split_encoder(initial_state.server)
    if not encoder:
        return None, None
    res = config.resources
    actor = SplitServer.options(num_cpus=res.server_cpus, num_gpus=res.server_gpus,
                                max_concurrency=num_workers + 2).remote(config, num_classes, encoder)
    ray.get(actor.ready.remote())
    return actor, ServerHandle(actor)


@ray.remote(num_cpus=0)
class Coordinator:
    """Runs :class:`~raysim.simulation.Simulation` next to the pool; the driver only asks for rounds.

    It declares no CPU so that it co-exists with a full pool on a small machine (it mostly waits).
    """

    def __init__(self, config, shards_box: list, initial_state, num_workers: int, client_states=None):
        """``shards_box`` is ``[ObjectRef]``: boxed so Ray hands the reference, not the block, to the
        workers (each then maps the same object-store block zero-copy)."""
        shards_ref = shards_box[0]
        shards = ray.get(shards_ref)
        self.server_actor, server = start_split_server(config, shards.info.num_classes, initial_state, num_workers)
        self.executor = RayExecutor(config, shards_ref, num_workers, shards.train_sizes(), shards.test_sizes(),
                                    self.server_actor)
        self.simulation = Simulation(config, shards, initial_state, self.executor, client_states, server)

    def ready(self) -> bool:
        """Returns once the pool is up (each worker has built its model)."""
        return True

    def run_round(self, round: int):
        return self.simulation.run_round(round)

    def global_state(self):
        return self.simulation.global_state()

    def snapshot(self):
        return self.simulation.snapshot()

    def worker_resources(self) -> list[dict]:
        return self.executor.resources()

    def shutdown(self) -> None:
        self.simulation.shutdown()
        if self.server_actor is not None:
            ray.kill(self.server_actor)
