"""Seconds-long settings and a simulation without tracking, for tests and benchmarks.

``TINY`` is the tests' setting (6 clients on the synthetic data, the nano backbone from random init, the sequential
backend); :func:`smoke_layers` adds the layers a method registered for it (FedGCR's typed clients, FedV's fedround),
so a test that loops over the registry runs every method without knowing any of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import ray

from raysim.config import build_config
from raysim.core.registry import get_method
from raysim.engine.driver import end_coordinator, make_simulation, start_coordinator, stop
from raysim.engine.ray_session import PoolReservation
from raysim.engine.setup import initial_state, prepare_shards, resolved
from raysim.tracking.checkpoint import Checkpoint

TINY = {
    "federation": {"clients": 6, "rounds": 2, "participation": 0.5, "seed": 1, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "train": {"local_epochs": 1},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
}


# FedVPT on 20 synthetic clients, 5 a round, 3 rounds: the engine tests' setting where a run must move the numbers
FAST = {
    "federation": {"clients": 20, "rounds": 3, "participation": 0.25, "seed": 3, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "dirichlet", "alpha": 1.0},
    "train": {"local_epochs": 1},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "fedvpt": {"prompt_length": 2},
}


def smoke_layers(method: str) -> list[dict]:
    """The layers under which ``method`` runs on ``TINY`` (as registered with it)."""
    smoke = get_method(method).smoke
    return [smoke] if smoke else []


def smoke_config(method: str, *layers: dict):
    """``method`` on ``TINY``, its smoke layers, then ``layers``."""
    return build_config(method, [TINY, *smoke_layers(method), *layers])


def prepared(config, shards=None, reservation: PoolReservation | None = None) -> tuple:
    """(``config`` resolved as the driver resolves it (precision, threads, the method's options), the initial global
    state, the shards with the method's cached features): what a run has before its first round. Given the run's
    pool ``reservation``, its workers start and the first builds the model (as on the driver of a Ray run); needed
    where clients train on GPUs on Ray and a feature pass runs (the initial state, which a Ray run's driver leaves
    in the object store, is fetched here)."""
    shards = shards if shards is not None else prepare_shards(config)
    config, initial, _, shards = initial_state(resolved(config), shards, reservation)
    return config, ray.get(initial) if isinstance(initial, ray.ObjectRef) else initial, shards


@contextmanager
def open_simulation(config, shards=None) -> Iterator[tuple]:
    """(simulation, initial global state, shards) of a new run of ``config`` at round 0, untracked: in this process
    for the sequential backend, a Coordinator with a reserved pool for Ray, started as a run's driver starts them
    (the coordinator's process imports the engine while the pool's first worker builds the model); stopped and
    released on exit."""
    with PoolReservation(config) if config.resources.backend == "ray" else nullcontext() as reservation:
        coordinator = start_coordinator() if reservation is not None else None
        simulation = None
        try:
            config, initial, shards = prepared(config, shards, reservation)
            start = Checkpoint("untracked", 0, config.to_dict(), initial, {}, "")
            pool = reservation.start(config, shards.info.num_classes) if reservation is not None else None
            simulation = make_simulation(config, shards, start, pool, coordinator=coordinator)
            yield simulation, initial, shards
        finally:
            if simulation is not None:
                stop(simulation, graceful=True)
            else:  # the set-up failed: the coordinator has no run to shut down
                end_coordinator(coordinator)


def run_rounds(config, shards=None) -> tuple[object, list, object]:
    """(initial global state, every round's report, final global state) of an untracked run."""
    with open_simulation(config, shards) as (simulation, initial, _):
        reports = [simulation.run_round(r) for r in range(1, config.federation.rounds + 1)]
        return initial, reports, simulation.global_state()
