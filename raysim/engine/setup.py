"""What a run needs before its first round: the data partitioned into client shards, and the initial global state
(with the per-row values a method caches), from one build of the model: by the pool's first worker on the Ray
backend, so the driver never imports the model code; here otherwise."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import numpy as np
import ray

from raysim.actors.proxy import unwrapped
from raysim.base import seeding
from raysim.base.errors import ConfigError
from raysim.base.precision import resolve
from raysim.base.ray_start import wait_for_ray
from raysim.base.seeding import Purpose
from raysim.config import Config, check_runnable
from raysim.core.registry import get_method, require_tiers
from raysim.data.partition import PARTITIONERS, PartitionParams, held_out_clients, partition
from raysim.data.shards import ShardStore, build_shards
from raysim.data.sources import cache_dir, load_dataset
from raysim.engine.cohort_plan import resolve_cohort
from raysim.engine.ray_session import PoolReservation
from raysim.privacy import calibration
from raysim.systems.profiles import draw_profiles

if TYPE_CHECKING:
    from raysim.core.messages import GlobalState

THREADS_ENV = "RAYSIM_TORCH_THREADS"  # torch threads per client worker when resources.threads is 0 (a test matrix)


def resolved(config: Config) -> Config:
    """``config`` with what depends on the machine made concrete, once, on the driver, before the run starts (and
    recorded with it): ``train.precision=auto`` (:func:`raysim.base.precision.resolve`), ``train.cohort=auto``
    (:func:`raysim.engine.cohort_plan.resolve_cohort`) and ``resources.threads=0`` (``$RAYSIM_TORCH_THREADS``, else the
    worker's CPUs, at least 1). Every worker then computes alike."""
    info = get_method(config.method)
    precision = resolve(config.train.precision, method_allows=info.bf16)
    threads = config.resources.threads or int(
        os.environ.get(THREADS_ENV) or max(1, int(config.resources.cpus_per_client))
    )
    return dataclasses.replace(
        config,
        train=dataclasses.replace(
            config.train, precision=precision, cohort=resolve_cohort(config.train, config.resources)
        ),
        resources=dataclasses.replace(config.resources, threads=threads),
    )


ON_DISK_BYTES = 256 * 2**20  # an image block larger than this is written to a file and mapped (on one machine)


def prepare_shards(config: Config) -> ShardStore:
    """Read the dataset, partition it over the clients and lay out the shard block: in memory, or, when it is larger
    than ``ON_DISK_BYTES`` and Ray runs on one machine, in a file every process maps (``data`` cache, ``shards/``)."""
    data = config.data
    info, arrays = load_dataset(data)
    is_test = arrays["is_test"].astype(bool)
    params = PartitionParams(
        s=data.s,
        class_sets=data.class_sets,
        alpha=data.alpha,
        beta=data.beta,
        beta_fine=data.beta_fine,
        pachinko=data.pachinko,
        dif=data.dif,
        domain_order=info.imbalance_order if data.domain_order == "paper" else None,
        domain_sizes=data.domain_sizes,
    )
    coarse = np.asarray(info.coarse_of_class) if info.coarse_of_class is not None else None
    part = partition(
        data.partition,
        train_labels=arrays["label"][~is_test],
        train_domains=arrays["domain"][~is_test],
        test_labels=arrays["label"][is_test],
        test_domains=arrays["domain"][is_test],
        num_classes=info.num_classes,
        num_domains=info.num_domains,
        num_clients=config.federation.clients,
        params=params,
        seed=seeding.derive_seed(config.federation.seed, Purpose.PARTITION),
        coarse_of_class=coarse,
        min_train_samples=data.min_train_samples,
    )
    fed = config.federation
    unseen = held_out_clients(
        fed.unseen_clients, fed.clients, part.client_domain, seeding.rng(fed.seed, Purpose.UNSEEN)
    )
    on_disk = arrays["image"].nbytes > ON_DISK_BYTES and _one_machine()
    folder = cache_dir() / "shards" if on_disk else None
    shards = build_shards(info, arrays, part, unseen, folder)
    evaluated, _ = seeding.evaluated_clients(fed, shards.seen_clients(), list(shards.unseen))
    if not shards.test_sizes()[evaluated].any():  # the run's accuracies would be means over no row
        raise ConfigError(
            f"federation.eval_clients={fed.eval_clients}'s sample holds no training client with test rows, so the "
            "run has no accuracy to report; raise federation.eval_clients"
            if fed.evaluates_a_sample
            else "no training client has test rows, so the run has no accuracy to report; give the data test rows"
        )
    return shards


def _one_machine() -> bool:
    """Whether the run has one machine: no Ray (the sequential backend), or Ray on one live node (once Ray is up: this
    may run while it starts)."""
    wait_for_ray()
    return not ray.is_initialized() or len([n for n in ray.nodes() if n["Alive"]]) == 1


def refuse_unrunnable(config: Config, shards: ShardStore | None = None) -> None:
    """One line for a run that cannot run, before anything is written: a method that reports per client type on a
    partition that types no client, a trace that does not fit the run or gives tiers to a method that cannot train by
    tier, a privacy delta too large for the units it protects or a target no noise reaches (record-level DP's units,
    the smallest clients' rows, only given the ``shards``). ``raysim tune`` and ``raysim compare`` check each run
    they would start here, before the data are read."""
    if get_method(config.method).needs_client_types and not PARTITIONERS[config.data.partition].needs_domains:
        raise ConfigError(
            f"{config.method} reports sigma_type and cluster_acc per client type, and the partition "
            f"{config.data.partition!r} gives clients no type; use --partition domains "
            f"(e.g. --dataset digits5 --partition domains)"
        )
    if config.clocked and draw_profiles(config.systems, config.federation.clients, config.federation.seed).tiered:
        require_tiers(config.method, f"the capacity tiers of {config.systems.trace or 'systems.tiers'}")
    if config.privacy.private and (shards is not None or config.privacy.mode != "record"):
        units = calibration.record_units(config, shards)
        calibration.check_delta(config, units)
        calibration.update_noise(config, units)


def initial_state(
    config: Config, shards: ShardStore, reservation: PoolReservation | None = None
) -> tuple[Config, GlobalState | ray.ObjectRef, float, ShardStore]:
    """The config with the method's options resolved on the backbone (:class:`~raysim.core.protocol.ResolvesOptions`),
    the initial global state, its number of trainable parameters, and the shards with the per-row values the method
    caches for the whole run (e.g. SGPT's frozen-backbone query), from one build of the model
    (:func:`~raysim.engine.model_setup.model_setup`, which checks the weights file). Given the run's pool
    ``reservation`` (the Ray backend), the pool's workers start here and the first one runs that build (with the CPUs
    the pool holds on its node), while the others build their models, which are awaited (a build refused on one node
    only is reported here too, before the run exists). So the driver never imports the model code, nor torch: the
    initial state stays in the object store (an ``ObjectRef``, which the coordinator takes), no process starts for
    the build alone, and the cached-feature pass runs on a worker's device (a GPU even where the driver's node has
    none, a cluster's head) in a CUDA context the worker needs anyway. The workers take ``config`` as given: its
    options resolve to values the method computes with exactly as with the placeholders. A pool the cluster could
    never hold is refused before the build. Without a reservation the build runs here.
    Checks the run first: the method's check of the whole config (:func:`~raysim.config.check_runnable`, which
    ``raysim run`` ran at once) and :func:`refuse_unrunnable`."""
    check_runnable(config)
    refuse_unrunnable(config, shards)
    res = config.resources
    if reservation is not None:
        wait_for_ray()
        workers = reservation.start(config, shards.info.num_classes).actors  # each builds its model now
        threads = max(res.torch_threads, int(reservation.cpus_beside_first_worker()))
        rows = shards if unwrapped(workers[0].caches_rows.remote()) else None
        options, initial, trainable, features = workers[0].model_setup.remote(rows, threads)
        options, trainable, features = unwrapped([options, trainable, features])
        unwrapped([worker.ready.remote() for worker in workers])  # a build refused on another node, before the run
        return (
            dataclasses.replace(config, options=options),
            initial,
            trainable,
            dataclasses.replace(shards, features=features),
        )
    from raysim.core.protocol import CachesRowFeatures
    from raysim.engine.model_setup import model_setup, trainable_count

    method = get_method(config.method).cls(config)
    rows = shards if isinstance(method, CachesRowFeatures) and method.caches_rows else None
    if res.backend == "ray" and res.gpus_per_client and rows is not None:
        raise ValueError("the cached-feature pass of a run whose clients train on GPUs needs its PoolReservation")
    options, initial, features = model_setup(config, shards.info.num_classes, rows)
    config, shards = dataclasses.replace(config, options=options), dataclasses.replace(shards, features=features)
    return config, initial, trainable_count(initial), shards
