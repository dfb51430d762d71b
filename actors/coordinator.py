"""``Coordinator``: a Ray actor holding the run's :class:`~raysim.engine.simulation.Simulation`, next to the worker
pool; the driver only asks it for rounds. It declares no CPU, so it co-exists with a full pool on a small machine (it
mostly waits).

This module imports no torch: the driver, which starts the coordinator, imports it; the engine loads in the
coordinator's own process (:meth:`Coordinator.__init__`)."""

from __future__ import annotations

import dataclasses

import ray


@ray.remote(num_cpus=0)
class Coordinator:
    """The Simulation under its role's name (``ray::Coordinator`` in the process list). Its process starts before the
    run's state exists (:func:`~raysim.engine.driver.start_coordinator`), so it imports torch and the engine while the
    pool's first worker builds the model; :meth:`begin` gives it the run's Simulation."""

    def __init__(self):  # the Simulation's arguments come with begin
        import raysim.engine.simulation  # noqa: F401  (torch and the engine, while the first worker builds)

        self._early_server, self.simulation = None, None

    def start_server(self, config, num_classes: int, pool) -> None:
        """Split learning's server, started and built in the run's set-up (before the run exists), so that a model
        the server's node cannot build (a weights file missing there) refuses the input before anything is written;
        :meth:`begin` gives it to the Simulation. Its ``ConfigError`` reaches the driver as itself."""
        from raysim.engine import executors

        self._early_server = executors.start_server(config, num_classes, pool)

    def begin(self, config, shards, start, pool, callbacks) -> None:
        """The run's Simulation, here, from ``start``: a checkpoint whose state may still be in the object store (a new
        run's initial state) or on disk (the driver read only its manifest: recovery, resume), with split learning's
        server (the one :meth:`start_server` started, else a new one). A ``ConfigError`` of that start reaches the
        driver as itself, in one line (``ActorProxy``)."""
        from raysim.engine.simulation import Simulation
        from raysim.tracking import checkpoint as ckpt

        if isinstance(start.state, ray.ObjectRef):
            start = dataclasses.replace(start, state=ray.get(start.state))
        start = ckpt.with_tensors(start)
        self.simulation = Simulation(config, shards, start, pool, callbacks, server=self._early_server)

    def run_round(self, round: int):
        return self.simulation.run_round(round)

    def global_state(self):
        return self.simulation.global_state()

    def worker_resources(self) -> list[dict]:
        return self.simulation.worker_resources()

    def checkpoint(self) -> str | None:
        return self.simulation.checkpoint()

    def results(self, folder: str) -> tuple[dict[str, float], list[str]]:
        return self.simulation.results(folder)

    def shutdown(self) -> None:
        self.simulation.shutdown()
