"""Where client work runs for a :class:`~raysim.engine.simulation.Simulation`: in this process, or on a pool of Ray
``ClientWorker`` actors; and split learning's server, which the engine starts for a method that asks for one.
"""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raysim.actors.proxy import ActorProxy
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.registry import get_method
from raysim.engine.client import ClientRuntime
from raysim.engine.cohort_plan import cohorts_of
from raysim.engine.ray_session import Pool

SHUTDOWN_WAIT_S = 120.0  # at most this long for the dispatches still training when a run ends


def balance(items: list, costs: list[float], parts: int) -> list[list]:
    """``items`` dealt into at most ``parts`` non-empty chunks of near-equal total cost (largest first, each to
    the least-loaded chunk; ties by position), so one worker with the big clients does not hold up the round."""
    parts = max(1, min(parts, len(items)))
    chunks, loads = [[] for _ in range(parts)], [0.0] * parts
    for index in sorted(range(len(items)), key=lambda i: (-costs[i], i)):
        target = loads.index(min(loads))
        chunks[target].append(items[index])
        loads[target] += costs[index]
    return [chunk for chunk in chunks if chunk]


class SequentialExecutor:
    """Every client in this process, one after another (tests, debugging)."""

    def __init__(self, config, shards, server=None):
        self.runtime = ClientRuntime(config, shards.info.num_classes)
        self.shards, self.server = shards, server

    def train(self, round: int, broadcast: Broadcast, tasks: list) -> list[ClientUpdate]:
        return self.runtime.train(round, broadcast, cohorts_of(tasks, self.runtime.config), self.shards, self.server)

    def submit(self, round: int, broadcast: Broadcast, task, dispatch: int) -> ClientUpdate:
        """Asynchronous mode: one dispatched client's update (trained now; :meth:`result` hands it back)."""
        return self.runtime.train(round, broadcast, [[task]], self.shards, self.server, dispatch)[0]

    def result(self, handle: ClientUpdate) -> ClientUpdate:
        return handle

    def evaluate(
        self, params: Tensors, client_ids: list[int], states: dict[int, Tensors]
    ) -> dict[int, tuple[int, int]]:
        return self.runtime.evaluate(params, client_ids, states, self.shards, self.server)

    def resources(self) -> list[dict]:
        return []

    def shutdown(self) -> None:
        pass


class RayExecutor:
    """A pool of ``ClientWorker`` actors with fractional resources; virtual clients are multiplexed over it.

    The workers are the pool's (:func:`~raysim.engine.ray_session.start_workers`). Each round the broadcast is put
    in the object store once and every worker gets one task with its share of the sampled clients' cohorts,
    balanced by rows, so per-round overhead is one call per worker, not one per client. The shards travel by
    reference with each call, so a worker Ray restarts after a crash needs nothing else.
    """

    def __init__(self, config, shards, shards_ref, pool: Pool, server=None):
        self.config, self.shards_ref, self.server = config, shards_ref, server
        self.workers = list(pool.actors)
        ray.get([w.ready.remote() for w in self.workers])
        self.train_sizes, self.test_sizes = shards.train_sizes(), shards.test_sizes()
        self.pending: list[list[ray.ObjectRef]] = [[] for _ in self.workers]  # asynchronous dispatches, per worker

    def train(self, round, broadcast, tasks):
        broadcast_ref = ray.put(broadcast)
        cohorts = cohorts_of(tasks, self.config)
        costs = [sum(1 + self.train_sizes[task[0]] for task in cohort) for cohort in cohorts]
        chunks = balance(cohorts, costs, len(self.workers))
        refs = [
            w.train.remote(round, broadcast_ref, chunk, self.shards_ref, self.server)
            for w, chunk in zip(self.workers, chunks)
        ]
        return [update for part in ray.get(refs) for update in part]

    def submit(self, round, broadcast, task, dispatch: int) -> ray.ObjectRef:
        """Asynchronous mode: one dispatched client's training, started on the worker with the fewest unfinished
        dispatches (ties: the first), so the pool keeps training while the server aggregates."""
        for worker in self.pending:
            if worker:
                done, _ = ray.wait(worker, num_returns=len(worker), timeout=0)
                worker[:] = [ref for ref in worker if ref not in done]
        index = min(range(len(self.workers)), key=lambda i: len(self.pending[i]))
        ref = self.workers[index].train.remote(round, broadcast, [[task]], self.shards_ref, self.server, dispatch)
        self.pending[index].append(ref)
        return ref

    def result(self, handle: ray.ObjectRef) -> ClientUpdate:
        return ray.get(handle)[0]

    def evaluate(self, params, client_ids, states):
        params_ref = ray.put(params)
        chunks = balance(client_ids, [1 + self.test_sizes[c] for c in client_ids], len(self.workers))
        refs = [
            w.evaluate.remote(
                params_ref, chunk, {c: states[c] for c in chunk if c in states}, self.shards_ref, self.server
            )
            for w, chunk in zip(self.workers, chunks)
        ]
        out = {}
        for part in ray.get(refs):
            out.update(part)
        return out

    def resources(self) -> list[dict]:
        """What Ray assigned to each worker (for checks and the run log)."""
        return ray.get([w.assigned_resources.remote() for w in self.workers])

    def shutdown(self) -> None:
        """Asynchronous mode's dispatches still queued are cancelled and the running ones waited for, so the pool's
        release (:class:`~raysim.engine.ray_session.PoolReservation`: the workers are the pool's) kills no task."""
        pending = [ref for worker in self.pending for ref in worker]
        for ref in pending:
            ray.cancel(ref)
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=SHUTDOWN_WAIT_S)


def start_server(config, num_classes: int, pool: Pool | None):
    """Split learning's server, its blocks built (:class:`~raysim.algorithms._split.ServerSegment`: the model code
    stays out of this process) but not yet loaded: in this process for the sequential backend, else a Ray actor
    serving every worker at once (``resources.server_cpus``/``server_gpus``, in the pool's reservation) behind a
    proxy."""
    from raysim.algorithms._split import ServerSegment

    segment = ServerSegment(config, num_classes)
    server_class = get_method(config.method).cls(config).server_class
    if pool is None:
        server = server_class(segment)
    else:
        res = config.resources
        placed = (
            {"scheduling_strategy": PlacementGroupSchedulingStrategy(pool.placement_group, pool.server_bundle)}
            if pool.server_bundle is not None
            else {}
        )
        actor = ray.remote(server_class).options(
            num_cpus=res.server_cpus, num_gpus=res.server_gpus, max_concurrency=pool.workers + 2, **placed
        )
        server = ActorProxy(actor.remote(segment, None, res.torch_threads), "the split-learning server")
    server.build()
    return server


def start_executor(config, shards, shards_ref, pool: Pool | None, encoder: Tensors, server=None):
    """The executor for ``config``'s backend, with split learning's server when the method asks for one: ``server``,
    one :func:`start_server` started (the coordinator's, from the run's set-up), else a new one; loaded with
    ``encoder``."""
    if get_method(config.method).split_learning:
        server = server or start_server(config, shards.info.num_classes, pool)
        server.load(encoder)
    if pool is None:
        return SequentialExecutor(config, shards, server)
    return RayExecutor(config, shards, shards_ref, pool, server)
