"""Ray for a run: join a cluster or start a lean local one, size the worker pool and reserve it with a placement
group (as a Tune trial's pool is reserved), so the pool either fits as a whole or the run stops with one line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raysim.actors.client_worker import ClientWorker
from raysim.core.errors import ConfigError
from raysim.core.ray_start import starting_ray
from raysim.engine.executors import Pool

T = TypeVar("T")
log = logging.getLogger("raysim")

HIDE_UNRESERVED_GPUS = "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"  # see connect_ray
SETTLE_S = 20.0  # how long a reservation the cluster could hold waits for resources other work holds

LEAN = {  # a local Ray for one run: no idle workers started up front, and none kept once idle (actors are not idle)
    "prestart_worker_first_driver": False,
    "num_workers_soft_limit": 0,
}


def connect_ray(resources) -> None:
    """Join ``resources.address`` or start a local Ray; reuse an open session.

    A local Ray is a single user's: token authentication (Ray 2.60's default) is turned off for it unless the user
    set ``RAY_AUTH_MODE``, the dashboard starts only with ``--dashboard`` (then on ``dashboard_host``, 127.0.0.1 by
    default), it keeps no idle worker processes (``LEAN``), and a worker that reserved no GPU sees none. A
    cluster's settings are the cluster's own (cluster/README.md; its configs hide unreserved GPUs too).
    """
    if ray.is_initialized():
        return
    warn_of_another_raysim(Path.cwd())
    kwargs = dict(logging_level=logging.WARNING, configure_logging=True)
    if resources.address:
        check_reachable(resources.address)
        try:
            ray.init(address=resources.address, **kwargs)
        except Exception as error:
            reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
            raise ConfigError(
                f"could not connect to Ray at {resources.address!r} ({reason}); start a cluster "
                f"with 'ray start --head' or 'ray up cluster/onprem.yaml', or drop --address"
            ) from None
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # Ray 2.60 no longer hides the GPUs from a worker that reserved none: a client worker on the CPU would see
        # them and train there (``pick_device``) unreserved. This restores the hiding (Ray issue 54868).
        os.environ.setdefault(HIDE_UNRESERVED_GPUS, "1")
        ray.init(
            include_dashboard=resources.dashboard,
            dashboard_host=resources.dashboard_host,
            _system_config=LEAN,
            **kwargs,
        )


def warn_of_another_raysim(folder: Path) -> None:
    """Ray puts the driver's working directory first on every worker's ``sys.path``: a run started in ``folder``
    holding a raysim package whose code differs from the one running here (a wheel installed from a checkout that
    changed since, run in the checkout) would run that folder's code in its workers. Says so, before Ray starts."""
    import raysim

    ours, theirs = Path(raysim.__file__).parent, folder / "raysim"
    if (theirs / "__init__.py").is_file() and theirs.resolve() != ours.resolve() and sources(theirs) != sources(ours):
        log.warning(
            "the workers will import %s (Ray puts the working directory first on their path), whose code differs "
            "from the raysim this command runs (%s): start it from another folder, or install this one with "
            "'pip install -e .'",
            theirs,
            ours,
        )


def sources(package: Path) -> dict[str, bytes]:
    """Every Python file of ``package`` (its linked folders too) by its path inside it."""
    found = {}
    for folder, _, files in os.walk(package, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                found[str(path.relative_to(package))] = path.read_bytes()
    return found


def connect_ray_during(resources, work: Callable[[], T], meanwhile: Callable[[], None] | None = None) -> T:
    """:func:`connect_ray` on this thread while ``work`` (reading the data, building the initial state) runs on
    another; ``work``'s result, or its error once Ray is up. What in ``work`` needs Ray waits for it
    (:func:`raysim.core.ray_start.wait_for_ray`: Ray Data generating or decoding a data set, the one-machine check).
    ``meanwhile`` runs on this thread once Ray is up, if ``work`` is still running (what ``work`` will need next and
    that has no effect outside the process, such as an import).

    A local Ray takes about 3 s to start, the driver waiting for its daemons: the data and the initial state are
    ready in that time (1.7 s less start-up in ``bench/scale.py`` at 100 x 200 with a cold decode cache). Ray stays
    on the calling thread, because the daemons it starts are killed when the thread that started them ends (Linux's
    parent-death signal is per thread).
    """
    outcome = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # re-raised on the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="raysim-setup", daemon=True)
    with starting_ray(thread):
        thread.start()
        connect_ray(resources)
    if meanwhile is not None and thread.is_alive():
        meanwhile()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, not minutes, when nothing listens at a HOST:PORT Ray address ('auto' is Ray's own check)."""
    if address == "auto":
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address!r} must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ConfigError(
            f"could not connect to Ray at {address!r} (nothing answers on {host}:{port}: "
            f"{error.strerror or error}); start a cluster with 'ray start --head' or drop --address"
        ) from None


def pool_size(config) -> int:
    """``--workers``, or as many workers as the cluster's free CPUs (and GPUs) fit, capped at the round's clients;
    inside a placement group (a ``raysim tune`` trial) ``--workers`` (at least 1), which the group already holds."""
    res = config.resources
    if res.workers or ray.util.get_current_placement_group() is not None:
        return max(1, res.workers)
    available = ray.available_resources()
    fits = [
        int(available.get("CPU", 0.0) // res.cpus_per_client)
        if res.cpus_per_client
        else int(max(available.get("CPU", 0.0), 1))
    ]
    if res.gpus_per_client:
        fits.append(int(available.get("GPU", 0.0) // res.gpus_per_client))
    return max(1, min(config.federation.clients_per_round, *fits))


def worker_bundle(resources) -> dict[str, float]:
    """One worker's reservation."""
    bundle = {"CPU": resources.cpus_per_client}
    if resources.gpus_per_client:
        bundle["GPU"] = resources.gpus_per_client
    return bundle


def start_workers(config, num_classes: int, pool: Pool) -> Pool:
    """``pool`` with its ``ClientWorker`` actors created, not waited for: each builds its model while the driver
    sets the run up and the coordinator starts, which then waits for them. They belong to the caller, not to a
    coordinator, so one that dies and is replaced drives the same workers; Ray restarts a worker that dies
    (``max_restarts=-1``) and re-runs its task."""
    res = config.resources
    actors = tuple(
        ClientWorker.options(
            num_cpus=res.cpus_per_client,
            num_gpus=res.gpus_per_client,
            max_restarts=-1,
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
        res, workers = self._config.resources, pool_size(self._config)
        current = ray.util.get_current_placement_group()
        pool, owned = (
            (Pool(workers, current, first_bundle=1), False)
            if current is not None
            else (Pool(workers, reserve_workers(res, workers)), True)
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

    def __enter__(self) -> PoolReservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def reserve_workers(resources, workers: int, settle_s: float = SETTLE_S) -> PlacementGroup:
    """A placement group of ``workers`` worker bundles, spread over the nodes. Refused at once when the whole
    cluster could not hold it (:func:`require_fit`); when it could, it waits up to ``settle_s`` for what other work
    (the data loading) holds to be freed, then is refused."""
    require_fit(resources, workers)
    group = placement_group([worker_bundle(resources) for _ in range(workers)], strategy="SPREAD")
    deadline = time.monotonic() + settle_s
    while not _ready(group, min(1.0, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() > deadline:
            remove_placement_group(group)
            raise ConfigError(
                f"{misfit(resources, workers)} while other work holds them (free now: {ray.available_resources()});"
                f" {remedy(workers)}"
            )
    return group


def require_fit(resources, workers: int) -> None:
    """Refuse at once ``workers`` workers that the whole Ray cluster could not hold, however long one waited."""
    need, total = worker_bundle(resources), ray.cluster_resources()
    if any(workers * value > total.get(key, 0.0) + 1e-9 for key, value in need.items()):
        raise ConfigError(f"{misfit(resources, workers)}; {remedy(workers)}")


def misfit(resources, workers: int) -> str:
    """What does not fit: the workers' reservation against the whole cluster's."""
    total = ray.cluster_resources()
    each = f"{workers} workers x" if workers != 1 else "1 worker x"
    return (
        f"{each} (cpus_per_client={resources.cpus_per_client}, gpus_per_client={resources.gpus_per_client}) "
        f"{'do' if workers != 1 else 'does'} not fit the Ray cluster's {total.get('CPU', 0):g} CPU, "
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
