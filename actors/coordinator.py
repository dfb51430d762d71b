"""``Coordinator``: a Ray actor of :class:`~raysim.engine.simulation.Simulation`, next to the worker pool; the driver
only asks it for rounds. It declares no CPU, so it co-exists with a full pool on a small machine (it mostly waits)."""

from __future__ import annotations

import ray

from raysim.actors.refusal import RefusesInOneLine
from raysim.engine.simulation import Simulation


@ray.remote(num_cpus=0)
class Coordinator(RefusesInOneLine, Simulation):
    """The Simulation under its role's name (``ray::Coordinator`` in the process list); a ``ConfigError`` of its start
    (split learning's server, building its blocks on another node) is raised by ``ready()``."""
