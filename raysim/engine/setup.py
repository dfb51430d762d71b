"""What a run needs before its first round: the data partitioned into client shards, and the initial global state
(with the per-row values a method caches), from one build of the model: in a Ray task in the first worker's bundle
of the pool's reservation on the Ray backend, so the driver never imports the model code; here otherwise."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import ray
import torch

from raysim.config import Config
from raysim.core import seeding
from raysim.core.errors import ConfigError
from raysim.core.messages import GlobalState
from raysim.core.protocol import CachesRowFeatures, ResolvesOptions
from raysim.core.ray_start import wait_for_ray
from raysim.core.registry import get_method, require_tiers
from raysim.core.seeding import Init, Purpose
from raysim.core.training import EVAL_BATCH, model_inputs
from raysim.data.npy_file import read_through
from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import ShardStore, build_shards
from raysim.data.sources import cache_dir, load_dataset
from raysim.engine.cohort import resolve_cohort
from raysim.engine.precision import autocast, full_width, resolve
from raysim.engine.ray_session import PoolReservation
from raysim.systems.profiles import draw_profiles

THREADS_ENV = "RAYSIM_TORCH_THREADS"  # torch threads per client worker when resources.threads is 0 (a test matrix)


def resolved(config: Config) -> Config:
    """``config`` with what depends on the machine made concrete, once, on the driver, before the run starts (and
    recorded with it): ``train.precision=auto`` (:func:`raysim.engine.precision.resolve`), ``train.cohort=auto``
    (:func:`raysim.engine.cohort.resolve_cohort`) and ``resources.threads=0`` (``$RAYSIM_TORCH_THREADS``, else the
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
    params = PartitionParams(s=data.s, alpha=data.alpha, beta=data.beta, beta_fine=data.beta_fine, dif=data.dif)
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
    unseen = seeding.rng(fed.seed, Purpose.UNSEEN).choice(fed.clients, size=fed.unseen_clients, replace=False)
    on_disk = arrays["image"].nbytes > ON_DISK_BYTES and _one_machine()
    folder = cache_dir() / "shards" if on_disk else None
    return build_shards(info, arrays, part, tuple(sorted(int(c) for c in unseen)), folder)


def _one_machine() -> bool:
    """Whether Ray runs on one live node (once Ray is up: this may run while it starts)."""
    wait_for_ray()
    return len([n for n in ray.nodes() if n["Alive"]]) == 1


def initial_state(
    config: Config, shards: ShardStore, reservation: PoolReservation | None = None
) -> tuple[Config, GlobalState, ShardStore]:
    """The config with the method's options resolved on the backbone (:class:`~raysim.core.protocol.ResolvesOptions`),
    the initial global state, and the shards with the per-row values the method caches for the whole run (e.g.
    SGPT's frozen-backbone query), from one build of the model (:func:`model_setup`, which checks the weights file).
    Given the run's pool ``reservation`` (the Ray backend), that build runs in :func:`model_setup_task` in the first
    worker's bundle, before the workers start: the driver never imports the model code (timm, torchvision: about
    110 MB and 2 s), the cached-feature pass runs on a worker's device (a GPU even where the driver's node has none,
    a cluster's head), and the CUDA context it needs ends with the task's process instead of staying in the driver
    for the whole run (720 MiB of an H200 after SGPT's pass, docs/architecture.md). A pool the cluster could never
    hold is refused before the build. Without a reservation the build runs here. Checks the clients' types and
    devices (a trace) first."""
    info = get_method(config.method)
    method = info.cls(config)
    if info.needs_client_types and shards.client_domain is None:
        raise ConfigError(
            f"{config.method} reports sigma_type and cluster_acc per client type, and the partition "
            f"{config.data.partition!r} gives clients no type; use --partition domains "
            f"(e.g. --dataset digits5 --partition domains)"
        )
    # a trace that does not fit the run (or gives tiers to a method that cannot train by tier) fails here, before
    # anything is written
    if config.clocked and draw_profiles(config.systems, shards.num_clients, config.federation.seed).tiered:
        require_tiers(config.method, f"the capacity tiers of {config.systems.trace or 'systems.tiers'}")
    rows = shards if isinstance(method, CachesRowFeatures) and method.caches_rows else None
    res = config.resources
    if reservation is not None:
        wait_for_ray()
        strategy = reservation.first_worker()  # the pool reserved now; its first worker starts here after the task
        threads = max(res.torch_threads, int(reservation.cpus_beside_first_worker()))
        task = MODEL_SETUP_TASK.options(
            num_cpus=res.cpus_per_client, num_gpus=res.gpus_per_client, scheduling_strategy=strategy
        )
        options, initial, features = _unwrapped(task.remote(config, shards.info.num_classes, rows, threads))
    elif res.backend == "ray" and res.gpus_per_client and rows is not None:
        raise ValueError("the cached-feature pass of a run whose clients train on GPUs needs its PoolReservation")
    else:
        options, initial, features = model_setup(config, shards.info.num_classes, rows)
    return dataclasses.replace(config, options=options), initial, dataclasses.replace(shards, features=features)


def model_setup(
    config: Config, num_classes: int, rows: ShardStore | None
) -> tuple[object, GlobalState, dict[str, np.ndarray]]:
    """Build the model once: the method's options resolved on it, its initial global state, and the values the method
    caches for each of ``rows``' images (None: it caches none), in one batched pass (:func:`features_here`). The
    shards, not their image block, travel to a task: a block in a file pickles as its path."""
    from raysim.models.factory import build_model  # the model code: only in the process that builds the model

    method = get_method(config.method).cls(config)
    model = build_model(config, method, num_classes)
    options = config.options
    if isinstance(method, ResolvesOptions):
        options = method.resolved_options(len(model.vit.blocks))
    generator = torch.Generator().manual_seed(
        seeding.derive_seed(config.federation.seed, Purpose.INIT, Init.GLOBAL_STATE)
    )
    features = {} if rows is None else features_here(method, model, rows.images, config.train.precision)
    return options, method.init_global(model, generator), features


def model_setup_task(
    config: Config, num_classes: int, rows: ShardStore | None, threads: int
) -> tuple[object, GlobalState, dict[str, np.ndarray]]:
    """:func:`model_setup` in a Ray task (the numbers of a build in the driver, bit for bit), with ``threads`` torch
    threads: the CPUs the pool holds on this node, idle until its workers start after the task."""
    torch.set_num_threads(threads)
    return model_setup(config, num_classes, rows)


# Its process exits after the task, and the CUDA context with it; a failed build is reported, not retried. Wrapped
# here, not decorated, so the function travels by name and the task's process runs this module's code.
MODEL_SETUP_TASK = ray.remote(max_calls=1, max_retries=0)(model_setup_task)


def _unwrapped(ref: ray.ObjectRef):
    """``ref``'s value; a bad weights file's one-line :class:`ConfigError` is raised as itself, not in Ray's
    traceback."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, ConfigError):
            raise error.cause from None
        raise


def features_here(method: CachesRowFeatures, model, images: np.ndarray, precision: str) -> dict[str, np.ndarray]:
    """:func:`row_features` on this process's device (the GPU where it has one), the model back on the CPU after
    and the GPU's cached blocks handed back. The model goes to the GPU for this pass alone."""
    from raysim.models.factory import pick_device

    device = pick_device()
    with autocast(device, precision):
        features = row_features(method, model.to(device), images, device)
    model.cpu()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return features


@torch.no_grad()
def row_features(method: CachesRowFeatures, model, images: np.ndarray, device: torch.device) -> dict[str, np.ndarray]:
    """``method.row_features`` over every row of ``images`` (batched)."""
    out: dict[str, list[np.ndarray]] = {}
    for batch in read_through(images, EVAL_BATCH):  # a mapped block's pages are not kept by the driver
        computed = method.row_features(model, model_inputs(model, batch, device))
        for name, values in computed.items():
            out.setdefault(name, []).append(full_width(values).cpu().numpy())
    return {name: np.concatenate(parts) for name, parts in out.items()}
