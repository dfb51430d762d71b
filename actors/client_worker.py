"""``ClientWorker``: a Ray actor holding one frozen model and the shard reference; runs virtual clients."""

from __future__ import annotations

import ray

from raysim.runtime import ClientRuntime


@ray.remote
class ClientWorker:
    """A pooled worker. Resources (num_cpus, num_gpus, fractional) are set with ``.options`` by the pool.

    The shard block arrives once, by reference (zero-copy numpy views); the backbone is built once here
    and never shipped per task.
    """

    def __init__(self, config, shards, server_actor=None):
        """``server_actor``: split learning's ``SplitServer`` (None for every other method)."""
        from raysim.actors.split_server import ServerHandle

        self.runtime = ClientRuntime(config, shards, None if server_actor is None else ServerHandle(server_actor))

    def ready(self) -> bool:
        return True

    def train(self, round, view, tasks):
        return self.runtime.train(round, view, tasks)

    def evaluate(self, view, client_ids, states):
        return self.runtime.evaluate(view, client_ids, states)

    def assigned_resources(self) -> dict:
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), **context.get_assigned_resources()}
