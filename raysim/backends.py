"""Executors for :class:`~raysim.simulation.Simulation`: in-process, or a pool of Ray ``ClientWorker`` actors."""

from __future__ import annotations

from raysim.runtime import ClientRuntime


class SequentialExecutor:
    """Runs every client in this process, one after another (tests, debugging)."""

    def __init__(self, config, shards, server=None):
        self.runtime = ClientRuntime(config, shards, server)

    def train(self, round, view, tasks):
        return self.runtime.train(round, view, tasks)

    def evaluate(self, view, client_ids, states):
        return self.runtime.evaluate(view, client_ids, states)

    def shutdown(self) -> None:
        pass


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


class RayExecutor:
    """A pool of ``ClientWorker`` actors with fractional resources; virtual clients are multiplexed over it.

    Each round the view is put in the object store once and every worker gets one task with its share of
    the sampled clients, balanced by rows, so per-round overhead is one call per worker, not one per client.
    """

    def __init__(self, config, shards_ref, num_workers: int, train_sizes, test_sizes, server_actor=None):
        """``server_actor``: split learning's ``SplitServer``; every worker's clients send it their requests."""
        import ray

        from raysim.actors.client_worker import ClientWorker

        res = config.resources
        self._ray = ray
        self.workers = [
            ClientWorker.options(num_cpus=res.cpus_per_client, num_gpus=res.gpus_per_client,
                                 max_restarts=-1, max_task_retries=3).remote(config, shards_ref, server_actor)
            for _ in range(num_workers)
        ]
        ray.get([w.ready.remote() for w in self.workers])
        self.train_sizes, self.test_sizes = train_sizes, test_sizes

    def train(self, round, view, tasks):
        view_ref = self._ray.put(view)
        chunks = balance(tasks, [1 + self.train_sizes[task[0]] for task in tasks], len(self.workers))
        refs = [w.train.remote(round, view_ref, chunk) for w, chunk in zip(self.workers, chunks)]
        return [result for part in self._ray.get(refs) for result in part]

    def evaluate(self, view, client_ids, states):
        view_ref = self._ray.put(view)
        chunks = balance(client_ids, [1 + self.test_sizes[c] for c in client_ids], len(self.workers))
        refs = [w.evaluate.remote(view_ref, chunk, {c: states[c] for c in chunk if c in states})
                for w, chunk in zip(self.workers, chunks)]
        out = {}
        for part in self._ray.get(refs):
            out.update(part)
        return out

    def resources(self) -> list[dict]:
        """What Ray assigned to each worker (for checks and the run log)."""
        return self._ray.get([w.assigned_resources.remote() for w in self.workers])

    def shutdown(self) -> None:
        for worker in self.workers:
            self._ray.kill(worker)
