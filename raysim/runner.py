"""The driver: validate, connect to Ray, build the shards, run the rounds, track everything in MLflow."""

from __future__ import annotations

import dataclasses
import logging
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from raysim import seeding
from raysim.checkpoint import Checkpoint
from raysim.config import Config, dump_yaml
from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import ShardStore, build_shards
from raysim.data.sources import load_dataset
from raysim.errors import ConfigError, RunInterrupted, SimulationLost
from raysim.method import GlobalState
from raysim.metrics import summarise
from raysim.progress import RoundProgress, print_summary
from raysim.registry import get_method
from raysim.round_loop import drive
from raysim.tracking import Tracker, check_run, check_store


@dataclass
class RunResult:
    """What a finished run returns: its MLflow id, the per-round history and the last-10 summary."""

    run_id: str
    history: list[dict[str, float]]
    summary: dict[str, dict[str, float]]
    client_acc: dict[int, float] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)


def connect_ray(resources) -> None:
    """Join ``resources.address`` or start a local Ray (dashboard on 127.0.0.1); reuse an open session."""
    import ray

    if ray.is_initialized():
        return
    kwargs = dict(logging_level=logging.WARNING, configure_logging=True)
    if resources.address:
        check_reachable(resources.address)
        try:
            ray.init(address=resources.address, **kwargs)
        except Exception as error:  # noqa: BLE001 - any failure to connect is a bad --address
            reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
            raise ConfigError(f"could not connect to Ray at {resources.address!r} ({reason}); start a cluster "
                              f"with 'ray start --head' or 'ray up cluster/onprem.yaml', or drop --address") from None
    else:
        ray.init(include_dashboard=True, dashboard_host=resources.dashboard_host, **kwargs)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


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
        raise ConfigError(f"could not connect to Ray at {address!r} (nothing answers on {host}:{port}: "
                          f"{error.strerror or error}); start a cluster with 'ray start --head' or drop --address") from None


def resolve_workers(config: Config, settle_s: float = 20.0) -> int:
    """The pool size: ``--workers``, or as many as the cluster's free CPUs (and GPUs) allow, capped at m; inside a
    placement group (a ``raysim tune`` trial) ``--workers`` (at least 1), which the group's bundles reserve.

    Ray frees what the data loading held a moment after it ends: a pool that fits the cluster's total resources
    waits up to ``settle_s`` for them to be free (a few seconds when sizing the pool from them), then is refused.
    """
    import ray

    res = config.resources
    if ray.util.get_current_placement_group() is not None:  # a Tune trial: its bundles already hold the pool
        return max(1, res.workers)
    total = ray.cluster_resources()
    deadline = time.monotonic() + (settle_s if res.workers else min(settle_s, 3.0))
    while True:
        available = ray.available_resources()
        cpus, gpus = available.get("CPU", 0.0), available.get("GPU", 0.0)
        if res.workers:
            workers = res.workers
        else:
            fits = [int(cpus // res.cpus_per_client) if res.cpus_per_client else int(max(cpus, 1))]
            if res.gpus_per_client:
                fits.append(int(gpus // res.gpus_per_client))
            workers = max(1, min(config.federation.clients_per_round, *fits))
        fit = workers * res.cpus_per_client <= cpus + 1e-9 and workers * res.gpus_per_client <= gpus + 1e-9
        settled = cpus >= total.get("CPU", 0.0) and gpus >= total.get("GPU", 0.0)
        possible = (workers * res.cpus_per_client <= total.get("CPU", 0.0) + 1e-9
                    and workers * res.gpus_per_client <= total.get("GPU", 0.0) + 1e-9)
        if (fit and (res.workers or settled)) or not possible or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    if not fit:
        raise ConfigError(
            f"{workers} workers x (cpus_per_client={res.cpus_per_client}, gpus_per_client={res.gpus_per_client}) "
            f"do not fit the free Ray resources ({cpus:g} CPU, {gpus:g} GPU); lower --workers or the per-client resources")
    return workers


def prepare_shards(config: Config) -> ShardStore:
    """Read the dataset, partition it over the clients and lay out the shard block."""
    data = config.data
    info, arrays = load_dataset(data)
    is_test = arrays["is_test"].astype(bool)
    params = PartitionParams(s=data.s, alpha=data.alpha, beta=data.beta, beta_fine=data.beta_fine, dif=data.dif)
    coarse = np.asarray(info.coarse_of_class) if info.coarse_of_class is not None else None
    part = partition(
        data.partition, train_labels=arrays["label"][~is_test], train_domains=arrays["domain"][~is_test],
        test_labels=arrays["label"][is_test], test_domains=arrays["domain"][is_test],
        num_classes=info.num_classes, num_domains=info.num_domains, num_clients=config.federation.clients,
        params=params, seed=seeding.derive_seed(config.federation.seed, "partition"),
        coarse_of_class=coarse, min_train_samples=data.min_train_samples)
    fed = config.federation
    unseen = seeding.rng(fed.seed, "unseen").choice(fed.clients, size=fed.unseen_clients, replace=False)
    return build_shards(info, arrays, part, tuple(sorted(int(c) for c in unseen)))


def initial_state(config: Config, shards: ShardStore) -> tuple[GlobalState, ShardStore]:
    """Build the model once on the driver: checks the weights file, yields the initial global state, and the
    shards with the per-row values the method caches for the whole run (e.g. SGPT's frozen-backbone query),
    computed here in one batched pass so no client recomputes them."""
    import torch

    from raysim.models.factory import build_model
    from raysim.precision import autocast
    from raysim.runtime import pick_device
    from raysim.train import row_features

    method = get_method(config.method)(config)
    if method.needs_client_types and shards.client_domain is None:
        raise ConfigError(f"{config.method} reports sigma_type and cluster_acc per client type, and the partition "
                          f"{config.data.partition!r} gives clients no type; use --partition domains "
                          f"(e.g. --dataset digits5 --partition domains)")
    device = pick_device()
    model = build_model(config, method, shards.info.num_classes).to(device)
    generator = torch.Generator().manual_seed(seeding.derive_seed(config.federation.seed, "init", 2))
    with autocast(device, config.train.precision):
        features = row_features(method, model, shards.images, device)
    return method.init_global(model.cpu(), generator), dataclasses.replace(shards, features=features)


class _RemoteSimulation:
    """The driver's handle on a ``Coordinator`` actor, with the Simulation's interface.

    The coordinator's death (or a worker's beyond Ray's task retries) surfaces as :class:`SimulationLost`, which
    the round loop answers by starting a new coordinator from the last checkpoint.
    """

    def __init__(self, config, shards: ShardStore, initial, workers: int, client_states=None):
        import ray

        from raysim.actors.coordinator import Coordinator

        self._ray = ray
        self.actor = Coordinator.remote(config, [ray.put(shards)], initial, workers, client_states)
        self._call(self.actor.ready)  # start-up (pool, models) happens here, not in round 1

    def _call(self, method, *args):
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return self._ray.get(method.remote(*args))
        except RayActorError as error:
            raise SimulationLost(f"the coordinator died ({type(error).__name__})") from None
        except RayTaskError as error:
            if isinstance(error.cause, RayActorError):
                raise SimulationLost(f"a client worker died beyond Ray's retries ({type(error.cause).__name__})") from None
            raise

    def run_round(self, round):
        return self._call(self.actor.run_round, round)

    def global_state(self):
        return self._call(self.actor.global_state)

    def snapshot(self):
        return self._call(self.actor.snapshot)

    def worker_resources(self):
        return self._call(self.actor.worker_resources)

    def shutdown(self, graceful: bool = True):
        """Stops the pool and the coordinator; ``graceful=False`` (an error or a second Ctrl-C) kills at once
        (the workers die with the coordinator that owns them)."""
        if graceful:
            self._ray.get(self.actor.shutdown.remote())
        self._ray.kill(self.actor)


def make_simulation(config: Config, shards: ShardStore, initial, workers: int | None = None, client_states=None):
    """A Simulation in this process (sequential backend) or in a Coordinator actor (Ray backend)."""
    if config.resources.backend == "sequential":
        from raysim.backends import SequentialExecutor
        from raysim.simulation import Simulation
        from raysim.split import make_server, split_encoder

        encoder, _ = split_encoder(initial.server)
        server = make_server(config, shards.info.num_classes, encoder) if encoder else None
        return Simulation(config, shards, initial, SequentialExecutor(config, shards, server), client_states, server)
    return _RemoteSimulation(config, shards, initial, workers or resolve_workers(config), client_states)


def describe(config: Config, shards: ShardStore) -> str:
    """One line with what is about to run."""
    fed, data, res = config.federation, config.data, config.resources
    where = "sequential" if res.backend == "sequential" else f"ray ({res.address or 'local'})"
    return (f"{config.method} | {data.dataset}/{data.partition} | {fed.clients} clients "
            f"({fed.clients_per_round}/round, {len(shards.unseen)} unseen) x {fed.rounds} rounds | "
            f"{config.model.backbone} | {config.train.precision} | {where} | seed {fed.seed}")


def run(config: Config, *, show_progress: bool = True, console=None, resume: Checkpoint | None = None,
        on_round: Callable[[int, dict, Path | None], None] | None = None,
        shards: ShardStore | None = None) -> RunResult:
    """Run one simulation end to end (or continue ``resume``'s) and return its history; the MLflow run ends
    FINISHED, FAILED or KILLED.

    Everything that can reject the input (store, resumed run, cluster, data, partition, weights, pool size)
    runs before the MLflow run is created or reopened, so bad input leaves nothing behind. The first Ctrl-C
    finishes the round, writes a checkpoint and raises :class:`RunInterrupted` with the resume command.
    ``on_round(round, metrics, checkpoint folder or None)`` is called after every round (Ray Tune reports there).
    ``shards``: the data already partitioned for this config (a sweep prepares them once for all its trials).
    """
    uri = config.tracking.resolved_uri
    check_store(uri)
    if resume is not None:
        check_run(uri, resume.run_id)
    connect_ray(config.resources)
    initial, shards = initial_state(config, shards if shards is not None else prepare_shards(config))
    workers = resolve_workers(config) if config.resources.backend == "ray" else None
    tracker = Tracker(uri)
    if resume is None:
        run_name = config.tracking.run_name or f"{config.method}-{config.data.dataset}-{config.data.partition}-s{config.federation.seed}"
        tags = {"method": config.method, "dataset": config.data.dataset, "partition": config.data.partition,
                "seed": str(config.federation.seed), "backend": config.resources.backend}
        run_id = tracker.start(config.tracking.experiment, run_name, config.flat(), tags)
        start = Checkpoint(run_id, 0, config.to_dict(), initial, {}, uri)
        run_folder = config.checkpoint.root(uri) / run_id
    else:
        tracker.attach(resume.run_id)
        run_id, start, run_folder = resume.run_id, resume, resume.folder.parent
    status = "FAILED"
    try:
        if resume is None:
            _log_setup(tracker, config, shards)

        def start_simulation(checkpoint: Checkpoint):
            return make_simulation(config, shards, checkpoint.state, workers, checkpoint.client_states)

        with RoundProgress(config.federation.rounds, describe(config, shards), enabled=show_progress,
                           console=console, done=start.round) as progress:
            outcome = drive(start, start_simulation, config, tracker, run_folder, progress, on_round)
        last = outcome.last
        if outcome.interrupted:
            status = "KILLED"
            raise RunInterrupted(f"stopped after round {last.round} of {config.federation.rounds}; checkpoint "
                                 f"{outcome.folder}; resume with: {resume_command(config, run_id, run_folder)}")
        summary = summarise(last.history)
        _log_results(tracker, config, last.state, last.history, summary, last.client_acc, run_id, last.records,
                     shards)
        print_summary(summary, run_id, config, console, last.history)
        status = "FINISHED"
        return RunResult(run_id, last.history, summary, last.client_acc, last.records)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.end(status)


def resume_command(config: Config, run_id: str, run_folder: Path) -> str:
    """The shortest ``raysim run`` line that continues this run from where its checkpoints are."""
    default = config.tracking.tracking_uri is None and config.checkpoint.dir is None
    return f"raysim run {config.method} --resume {run_id if default else run_folder}"


def _log_setup(tracker: Tracker, config: Config, shards: ShardStore) -> None:
    from raysim.data.partition_plot import partition_summary, plot_partition

    tracker.log_text(dump_yaml(config), "config.yaml")
    train_client = np.repeat(np.arange(shards.num_clients), shards.train_sizes())
    labels = shards.labels[: shards.train_offsets[-1]]
    summary = partition_summary(train_client, labels, shards.num_clients, shards.info.num_classes)
    counts = summary.pop("counts")
    tracker.log_json({**summary, "unseen_clients": list(shards.unseen),
                      "test_sizes": shards.test_sizes().tolist(), "train_counts": counts.tolist()},
                     "partition_summary.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "partition.png"
        plot_partition(train_client, labels, shards.num_clients, shards.info.num_classes, path)
        tracker.log_artifact(path)


def _log_results(tracker, config, state, history, summary, client_acc, run_id, records, shards) -> None:
    from safetensors.torch import save_file

    from raysim.plots import plot_accuracy_curves, plot_client_accuracy, plot_type_accuracy, type_accuracy_table

    title = f"{config.method} on {config.data.dataset}/{config.data.partition}"
    result = {"run_id": run_id, "method": config.method, "summary": summary, "final": history[-1],
              "client_acc": {str(c): a for c, a in client_acc.items()}, "finished_at": time.time()}
    tracker.log_json(result, "summary.json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plot_accuracy_curves(history, title, tmp / "accuracy_curves.png")
        plot_client_accuracy(client_acc, title + " (final)", tmp / "client_accuracy.png")
        tensors = {f"params/{k}": v.contiguous() for k, v in state.params.items()}
        tensors.update({f"server/{k}": v.contiguous() for k, v in state.server.items()})
        save_file(tensors, str(tmp / "global_state.safetensors"), metadata={"method": config.method})
        method_files = get_method(config.method)(config).artifacts(records, tmp)
        if shards.client_domain is not None and client_acc:
            table = type_accuracy_table(client_acc, shards.client_domain, shards.info.domain_names)
            tracker.log_json(table, "type_accuracy.json")
            plot_type_accuracy(table, title + ": accuracy per client type (final)", tmp / "type_accuracy.png")
            method_files.append(tmp / "type_accuracy.png")
        for path in [tmp / "accuracy_curves.png", tmp / "client_accuracy.png", tmp / "global_state.safetensors",
                     *method_files]:
            tracker.log_artifact(path)
    tracker.log_metrics({f"summary.{k}.{stat}": v for k, stats in summary.items() for stat, v in stats.items()},
                        step=config.federation.rounds)
