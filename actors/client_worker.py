"""``ClientWorker``: a Ray actor of :class:`~raysim.engine.client.ClientRuntime` (one frozen model, any number of
virtual clients). Resources (fractional CPUs and GPUs, its placement-group bundle) are set with ``.options``. The
pool's first worker also runs the model's one build before round 1 (:meth:`ClientWorker.model_setup`)."""

from __future__ import annotations

import ray
import torch

from raysim.core.errors import ConfigError
from raysim.engine.client import ClientRuntime
from raysim.engine.model_setup import model_setup


@ray.remote
class ClientWorker(ClientRuntime):
    def __init__(self, config, num_classes: int):
        self._setup_args, self._refused = (config, num_classes), None
        try:
            super().__init__(config, num_classes)
        except ConfigError as error:  # bad input (a weights file, a prompt option): the first worker's model_setup
            self._refused = error  # says it in one line; raised here, Ray would print the actor's creation traceback

    def ready(self) -> bool:
        """Returns once the model is built; raises what refused the build."""
        if self._refused is not None:
            raise self._refused
        return True

    def model_setup(self, rows, threads: int):
        """:func:`~raysim.engine.model_setup.model_setup` for this worker's config (the numbers of a build in the
        driver, bit for bit), with ``threads`` torch threads (the CPUs the pool holds on this node: the other workers
        there build their models meanwhile, then wait for round 1), its own after. It runs on this worker's model, not
        a second build (one model on the device, even during the pass), unless the model is split: a split method's
        set-up needs the server's blocks, which this model gave up."""
        self.ready()
        config, num_classes = self._setup_args
        torch.set_num_threads(threads)
        own = self.model.cpu() if self.remote is None else None
        try:
            return model_setup(config, num_classes, rows, own)
        finally:
            self.model.to(self.device)
            torch.set_num_threads(config.resources.torch_threads)

    def assigned_resources(self) -> dict:
        """The node and the resources Ray gave this worker."""
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), **context.get_assigned_resources()}
