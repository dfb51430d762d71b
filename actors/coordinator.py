"""``Coordinator``: a Ray actor of :class:`~raysim.engine.simulation.Simulation`, next to the worker pool; the driver
only asks it for rounds. It declares no CPU, so it co-exists with a full pool on a small machine (it mostly waits)."""

from __future__ import annotations

import ray

from raysim.engine import executors
from raysim.engine.simulation import Simulation


@ray.remote(num_cpus=0)
class Coordinator(Simulation):
    """The Simulation under its role's name (``ray::Coordinator`` in the process list). Its process starts before the
    run's state exists (:func:`~raysim.engine.driver.start_coordinator`), so it imports torch and the engine while the
    pool's first worker builds the model; :meth:`begin` makes it the run's Simulation."""

    def __init__(self):  # the Simulation's arguments come with begin
        self._early_server = None

    def start_server(self, config, num_classes: int, pool: executors.Pool) -> None:
        """Split learning's server, started and built in the run's set-up (before the run exists), so that a model
        the server's node cannot build (a weights file missing there) refuses the input before anything is written;
        :meth:`begin` gives it to the Simulation. Its ``ConfigError`` reaches the driver as itself."""
        self._early_server = executors.start_server(config, num_classes, pool)

    def begin(self, *args) -> None:
        """``Simulation(*args)`` here: the round loop's state and the executor (with split learning's server, the one
        :meth:`start_server` started, else a new one). A ``ConfigError`` of that start reaches the driver as itself,
        in one line (``ActorProxy``)."""
        Simulation.__init__(self, *args, server=self._early_server)
