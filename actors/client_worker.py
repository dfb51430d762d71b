"""``ClientWorker``: a Ray actor holding a :class:`~raysim.engine.client.ClientRuntime` (one frozen model, any number
of virtual clients). Resources (fractional CPUs and GPUs, its placement-group bundle) are set with ``.options``. The
pool's first worker also runs the model's one build before round 1 (:meth:`ClientWorker.model_setup`).

This module imports no torch: the driver, which creates the workers, imports it; the engine (torch, the model)
loads in the worker's own process, in :meth:`ClientWorker.__init__`."""

from __future__ import annotations

import ray

from raysim.base.errors import ConfigError


@ray.remote
class ClientWorker:
    def __init__(self, config, num_classes: int):
        from raysim.engine.client import ClientRuntime

        self._setup_args, self._refused, self.runtime = (config, num_classes), None, None
        try:
            self.runtime = ClientRuntime(config, num_classes)
        except ConfigError as error:  # bad input (a weights file, a prompt option): the first worker's model_setup
            self._refused = error  # says it in one line; raised here, Ray would print the actor's creation traceback

    def ready(self) -> bool:
        """Returns once the model is built; raises what refused the build."""
        if self._refused is not None:
            raise self._refused
        return True

    def train(self, *args):
        """:meth:`ClientRuntime.train <raysim.engine.client.ClientRuntime.train>`."""
        self.ready()  # a worker Ray restarted where its build is refused says why
        return self.runtime.train(*args)

    def evaluate(self, *args):
        """:meth:`ClientRuntime.evaluate <raysim.engine.client.ClientRuntime.evaluate>`."""
        self.ready()
        return self.runtime.evaluate(*args)

    def caches_rows(self) -> bool:
        """Whether the run's method caches per-row values from the frozen backbone (which :meth:`model_setup` then
        computes for the rows it is given)."""
        from raysim.core.protocol import CachesRowFeatures

        self.ready()
        return isinstance(self.runtime.method, CachesRowFeatures) and self.runtime.method.caches_rows

    @ray.method(num_returns=4)
    def model_setup(self, rows, threads: int):
        """:func:`~raysim.engine.model_setup.model_setup` for this worker's config (the numbers of a build in the
        driver, bit for bit), with ``threads`` torch threads (the CPUs the pool holds on this node: the other workers
        there build their models meanwhile, then wait for round 1), its own after. It runs on this worker's model, not
        a second build (one model on the device, even during the pass), unless the model is split: a split method's
        set-up needs the server's blocks, which this model gave up. Four objects, so that the caller takes the
        options, the trainable count and the features without the initial state's tensors (the coordinator takes
        those): options, initial state, trainable count, features."""
        import torch

        from raysim.engine.model_setup import model_setup, trainable_count

        self.ready()
        config, num_classes = self._setup_args
        runtime = self.runtime
        torch.set_num_threads(threads)
        own = runtime.model.cpu() if runtime.remote is None else None
        try:
            options, initial, features = model_setup(config, num_classes, rows, own)
            return options, initial, trainable_count(initial), features
        finally:
            runtime.model.to(runtime.device)
            torch.set_num_threads(config.resources.torch_threads)

    def assigned_resources(self) -> dict:
        """The node (its id and address) and the resources Ray gave this worker."""
        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            **context.get_assigned_resources(),
        }
