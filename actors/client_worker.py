"""``ClientWorker``: a Ray actor of :class:`~raysim.engine.client.ClientRuntime` (one frozen model, any number of
virtual clients). Resources (fractional CPUs and GPUs, its placement-group bundle) are set with ``.options``."""

from __future__ import annotations

import ray

from raysim.engine.client import ClientRuntime


@ray.remote
class ClientWorker(ClientRuntime):
    def assigned_resources(self) -> dict:
        """The node and the resources Ray gave this worker."""
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), **context.get_assigned_resources()}
