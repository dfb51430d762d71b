"""A run's worker pool on Ray: size it, reserve it with a placement group (as a Tune trial's pool is reserved), so
the pool either fits as a whole or the run stops with one line, and start its workers. Joining or starting Ray is
:mod:`raysim.engine.ray_connect`'s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raysim.actors.client_worker import ClientWorker
from raysim.base.errors import ConfigError
from raysim.core.registry import get_method


@dataclass(frozen=True)
class Pool:
    """The Ray worker pool: its size, its reservation (worker i takes bundle ``first_bundle + i`` of
    ``placement_group``: a run's own group, or a Tune trial's, whose bundle 0 is the trial itself; split learning's
    server, when it takes resources, bundle ``server_bundle`` of a run's own) and its ``ClientWorker`` actors once
    started (:func:`start_workers`)."""

    workers: int
    placement_group: object
    first_bundle: int = 0
    actors: tuple = ()
    server_bundle: int | None = None


# Ray restarts a client worker that dies this many times in a run; one that dies again makes its task fail, and the
# run stops with the command that resumes it instead of waiting on a worker that cannot start (OOM-killed builds)
WORKER_RESTARTS = 10
SETTLE_S = 20.0  # how long a reservation the cluster could hold waits for resources other work holds


def pool_size(config) -> int:
    """``--workers``, or as many workers as the cluster's free CPUs (and GPUs) fit, capped at the clients that train
    at once (a round's selected clients; in asynchronous mode, those in flight); inside a placement group (a ``raysim
    tune`` trial) ``--workers`` (at least 1), which the group already holds."""
    res = config.resources
    if res.workers or ray.util.get_current_placement_group() is not None:
        return max(1, res.workers)
    available = dict(ray.available_resources())
    for key, value in (server_bundle(config) or {}).items():  # what split learning's server takes is not theirs
        available[key] = available.get(key, 0.0) - value
    fits = [
        how_many(available.get("CPU", 0.0), res.cpus_per_client)
        if res.cpus_per_client
        else int(max(available.get("CPU", 0.0), 1))
    ]
    if res.gpus_per_client:
        fits.append(how_many(available.get("GPU", 0.0), res.gpus_per_client))
    fed = config.federation
    return max(1, min(fed.concurrent_clients if fed.asynchronous else fed.clients_selected, *fits))


RAY_UNIT = 10_000  # Ray counts a resource in 1/10,000ths


def how_many(available: float, each: float) -> int:
    """How many reservations of ``each`` fit in ``available``, counted in Ray's units as Ray counts them (in floats,
    2.0 // 0.4 is 4: one worker short)."""
    return round(available * RAY_UNIT) // round(each * RAY_UNIT)


def worker_bundle(resources) -> dict[str, float]:
    """One worker's reservation."""
    bundle = {"CPU": resources.cpus_per_client}
    if resources.gpus_per_client:
        bundle["GPU"] = resources.gpus_per_client
    return bundle


def server_bundle(config) -> dict[str, float] | None:
    """Split learning's server's reservation (``resources.server_cpus``/``server_gpus``), reserved with the workers';
    None when it takes none (it then runs beside them, as the coordinator does)."""
    res = config.resources
    bundle = {key: value for key, value in (("CPU", res.server_cpus), ("GPU", res.server_gpus)) if value}
    return bundle if bundle and get_method(config.method).split_learning else None


def start_workers(config, num_classes: int, pool: Pool) -> Pool:
    """``pool`` with its ``ClientWorker`` actors created, not waited for: each builds its model while the driver
    sets the run up and the coordinator starts, which then waits for them. They belong to the caller, not to a
    coordinator, so one that dies and is replaced drives the same workers; Ray restarts a worker that dies (up to
    :data:`WORKER_RESTARTS` times) and re-runs its task."""
    res = config.resources
    actors = tuple(
        ClientWorker.options(
            num_cpus=res.cpus_per_client,
            num_gpus=res.gpus_per_client,
            max_restarts=WORKER_RESTARTS,
            max_task_retries=3,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pool.placement_group, pool.first_bundle + i),
        ).remote(config, num_classes)
        for i in range(pool.workers)
    )
    return dataclasses.replace(pool, actors=actors)


class PoolReservation:
    """A run's worker pool, reserved once, on first use, and given back on exit (a context manager).

    The reservation is a Tune trial's own placement group (its bundle 0 is the trial, the workers take the rest),
    else a new group from :func:`reserve_workers`. The workers start once, on the first :meth:`start` (the model's
    set-up, whose build the first of them runs), and the pool is sized before anything ran. The set-up thread may
    reserve or start while the caller, stopped by Ctrl-C, releases: what comes after the release is given back at
    once.
    """

    def __init__(self, config) -> None:
        self._config = config
        self._pool: Pool | None = None
        self._owned = False
        self._released = False
        self._lock = threading.Lock()

    def cpus_beside_first_worker(self) -> float:
        """The CPUs the pool holds on its first worker's node (that worker's among them), reserving it now if nothing
        did yet."""
        pool = self._reserved()
        nodes = placement_group_table(pool.placement_group)["bundles_to_node_id"]
        workers = range(pool.first_bundle, pool.first_bundle + pool.workers)
        return sum(nodes[i] == nodes[pool.first_bundle] for i in workers) * self._config.resources.cpus_per_client

    def start(self, config, num_classes: int) -> Pool:
        """The pool with its workers started (:func:`start_workers`) for ``config``, on the reservation (made now if
        nothing made it): by the first call; a later one returns the same pool."""
        pool = self._reserved()
        if pool.actors:
            return pool
        started = start_workers(config, num_classes, pool)
        with self._lock:
            if not self._released:
                self._pool = started
                return started
        for actor in started.actors:
            ray.kill(actor)
        raise RuntimeError("the run's worker pool was released (Ctrl-C) while its workers were starting")

    def _reserved(self) -> Pool:
        if self._pool is not None:
            return self._pool
        if self._released:
            raise RuntimeError("the run's worker pool was released (Ctrl-C) before it was reserved")
        res, workers, server = self._config.resources, pool_size(self._config), server_bundle(self._config)
        current = ray.util.get_current_placement_group()
        pool, owned = (
            (Pool(workers, current, first_bundle=1), False)
            if current is not None
            else (Pool(workers, reserve_workers(res, workers, server), server_bundle=workers if server else None), True)
        )
        with self._lock:
            if not self._released:
                self._pool, self._owned = pool, owned
                return pool
        if owned:
            remove_placement_group(pool.placement_group)
        raise RuntimeError("the run's worker pool was released (Ctrl-C) while its placement group was being reserved")

    def release(self) -> None:
        """Stop the pool's workers and give back the placement group if the run reserved it."""
        with self._lock:
            pool, owned, self._pool, self._released = self._pool, self._owned, None, True
        if pool is None:
            return
        for actor in pool.actors:
            ray.kill(actor)
        if owned:
            remove_placement_group(pool.placement_group)

    def forget(self) -> None:
        """Let go of the pool without asking Ray (which went down): :meth:`release` then does nothing."""
        with self._lock:
            self._pool, self._released = None, True

    def __enter__(self) -> PoolReservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def reserve_workers(
    resources, workers: int, server: dict[str, float] | None = None, settle_s: float = SETTLE_S
) -> PlacementGroup:
    """A placement group of ``workers`` worker bundles and, last, split learning's ``server`` bundle if it takes
    resources, spread over the nodes. Refused at once when the whole cluster could not hold it (:func:`require_fit`);
    when it could, it waits up to ``settle_s`` for what other work (the data loading) holds to be freed, then is
    refused."""
    require_fit(resources, workers, server)
    bundles = [worker_bundle(resources) for _ in range(workers)] + ([server] if server else [])
    group = placement_group(bundles, strategy="SPREAD")
    deadline = time.monotonic() + settle_s
    while not _ready(group, min(1.0, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() > deadline:
            remove_placement_group(group)
            raise ConfigError(
                f"{misfit(resources, workers, server)} while other work holds them (free now: "
                f"{ray.available_resources()}); {remedy(workers)}"
            )
    return group


def require_fit(resources, workers: int, server: dict[str, float] | None = None) -> None:
    """Refuse at once ``workers`` workers (and split learning's ``server``) that the whole Ray cluster could not
    hold, however long one waited."""
    need, total, server = worker_bundle(resources), ray.cluster_resources(), server or {}
    for key in {*need, *server}:
        if workers * need.get(key, 0.0) + server.get(key, 0.0) > total.get(key, 0.0) + 1e-9:
            raise ConfigError(f"{misfit(resources, workers, server)}; {remedy(workers)}")


def misfit(resources, workers: int, server: dict[str, float] | None = None) -> str:
    """What does not fit: the workers' (and the server's) reservation against the whole cluster's."""
    total = ray.cluster_resources()
    each = f"{workers} workers x" if workers != 1 else "1 worker x"
    beside = (
        f" and split learning's server (server_cpus={resources.server_cpus}, server_gpus={resources.server_gpus})"
        if server
        else ""
    )
    return (
        f"{each} (cpus_per_client={resources.cpus_per_client}, gpus_per_client={resources.gpus_per_client}){beside} "
        f"{'do' if workers != 1 or server else 'does'} not fit the Ray cluster's {total.get('CPU', 0):g} CPU, "
        f"{total.get('GPU', 0):g} GPU"
    )


def remedy(workers: int) -> str:
    return (
        "lower --workers or the per-client resources" if workers != 1 else "lower --cpus-per-client/--gpus-per-client"
    )


def _ready(group, timeout_s: float) -> bool:
    try:
        ray.get(group.ready(), timeout=timeout_s)
        return True
    except ray.exceptions.GetTimeoutError:
        return False
