"""``Coordinator``: a Ray actor that owns the global state and drives the worker pool each round."""

from __future__ import annotations

import ray

from raysim.backends import RayExecutor
from raysim.simulation import Simulation


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
        self.executor = RayExecutor(config, shards_ref, num_workers, shards.train_sizes(), shards.test_sizes())
        self.simulation = Simulation(config, shards, initial_state, self.executor, client_states)

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
