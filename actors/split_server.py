"""``SplitServer``: a Ray actor owning split learning's encoder (FedV/FedVZ), and the handle clients call it by."""

from __future__ import annotations

import ray
import torch

from raysim.split import make_server


@ray.remote
class SplitServer:
    """Serves every worker's clients at once (a threaded actor: ``max_concurrency`` set by the coordinator);
    :class:`raysim.split.EncoderServer` does the work. Resources: ``resources.server_cpus`` and ``server_gpus``."""

    def __init__(self, config, num_classes: int, encoder):
        torch.set_num_threads(config.resources.torch_threads)  # the sequential backend's thread count: same numbers
        self.server = make_server(config, num_classes, encoder)

    def ready(self) -> bool:
        return True

    def forward(self, key, h):
        return self.server.forward(key, h)

    def backward(self, key, grad_out, keep_for=None):
        return self.server.backward(key, grad_out, keep_for)

    def perturbed(self, h, seed, eps):
        return self.server.perturbed(h, seed, eps)

    def step_gradient(self, clients, lr):
        return self.server.step_gradient(clients, lr)

    def step_spsa(self, estimates, lr):
        return self.server.step_spsa(estimates, lr)

    def end_round(self):
        return self.server.end_round()

    def state(self):
        return self.server.state()


class ServerHandle:
    """The :class:`~raysim.split.EncoderServer` interface over a ``SplitServer`` actor (each call waits for its reply)."""

    def __init__(self, actor):
        self.actor = actor

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        remote_method = getattr(self.actor, name)
        return lambda *args: ray.get(remote_method.remote(*args))
