"""The attacks put together: a captured message (or a run's final global state) in, scored results out.

The attacker builds the run's model from its configuration (the public backbone, the method's prompt layout, the
run seed's initialisation of what never trains), loads the tensors the server holds, and attacks; a client's rows
are read only afterwards, to score what the attack produced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from raysim.algorithms._group_custom import gc_net
from raysim.algorithms.fedgcr.method import REPR
from raysim.attacks import scores
from raysim.attacks.analytic import embedding_inverse, position_prefix
from raysim.attacks.capture import Captured
from raysim.attacks.feature_means import FeatureInference, most_common, read_off
from raysim.attacks.inverting import InvertingSettings, attack_loss, search
from raysim.attacks.labels import label_counts, recovered_labels
from raysim.attacks.local_epoch import local_steps, rows_reached, update_loss
from raysim.attacks.observed import observed_gradient, observed_update
from raysim.base.errors import ConfigError
from raysim.base.seeding import Purpose, derive_seed
from raysim.config import Config
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.protocol import CachesRowFeatures
from raysim.core.registry import METHODS, get_method
from raysim.core.training import batch_plan, model_inputs
from raysim.data.shards import ClientData
from raysim.engine.cohort import unfused_attention


def attacker_model(config: Config, num_classes: int, params: Tensors | None):
    """The run's model (:func:`raysim.models.factory.build_model`) holding ``params`` (None: as built, the public
    pretrained backbone), on the CPU (with this process's threads), and the method."""
    from raysim.models.factory import build_model  # timm: only where a model is built

    method = get_method(config.method).cls(config)
    model = build_model(config, method, num_classes)
    if params is not None:
        model.load_trainable(params)
    return model, method


def refuse_cached_row_features(config: Config) -> None:
    """Refuse (one line) a method whose clients read per-row features cached before the run (SGPT's and FGPT's
    prompt selection, FedGCR's frozen class token), which the reconstruction's forward, the prompted model's own,
    does not model."""
    if isinstance(get_method(config.method).cls(config), CachesRowFeatures):
        raise ConfigError(
            f"{config.method}'s clients read per-row features cached before the run, which a reconstruction does not "
            "model; attack fedavg, fedvpt or another method whose forward is the prompted model's"
        )


def refuse_unmodelled_training(config: Config) -> None:
    """Refuse (one line) a method whose clients train otherwise than FedAvg's local SGD on cross-entropy (their own
    ``client_update``: MOON's contrastive term, FedSAM's perturbed steps, Ditto's two models, ...), which the
    reconstruction's objective does not model. A method that changes only the loss (FedProx) passes for one local
    step, where its proximal term's gradient is zero (:func:`update_objective` refuses its longer updates)."""
    fedavg = get_method("fedavg").cls
    if get_method(config.method).cls.client_update is not fedavg.client_update:
        modelled = [name for name in METHODS if get_method(name).cls.client_update is fedavg.client_update]
        raise ConfigError(
            f"{config.method}'s clients train with their own local update, which a reconstruction does not model; "
            f"attack a method that trains as FedAvg does: {', '.join(modelled)}"
        )


@dataclass
class Reconstruction:
    """One client's reconstruction: its images beside the originals (``[N, H, W, C]`` in [0, 1], paired), the labels
    recovered (none for an attack that recovers none) and the true ones, PSNR and SSIM per image, the attack's final
    loss and its seconds."""

    client: int
    originals: np.ndarray
    images: np.ndarray
    labels: list[int]
    true_labels: list[int]
    psnr: list[float]
    ssim: list[float]
    loss: float
    seconds: float


def update_objective(update: ClientUpdate, broadcast: Broadcast, config: Config, model):
    """What Inverting Gradients matches in ``update``: (the attacked tensors, the labels read off them, the loss
    ``(x, labels, tv) -> tensor`` to minimise in ``x``). One step's gradient is matched by cosine (Geiping et al.,
    Section 4); several steps' update through the simulated local training (Section 5,
    :mod:`raysim.attacks.local_epoch`)."""
    if int(update.metrics.get("steps", 0)) == 1:
        gradient = observed_gradient(update, broadcast, config)
        rows = rows_reached(config, update)
        return gradient, recovered_labels(gradient, rows), partial(attack_loss, model, gradient)
    if get_method(config.method).cls.loss is not get_method("fedavg").cls.loss:
        raise ConfigError(
            f"client {update.client_id} took {int(update.metrics.get('steps', 0))} local steps, and {config.method}'s "
            "loss adds a term the simulated local training does not model (its gradient is zero at the first step "
            "only); attack a run of one local step (train.batch_size at least a client's rows, --local-epochs 1)"
        )
    observed, steps = observed_update(update, broadcast, config), local_steps(config, update)

    def loss(x: torch.Tensor, labels: torch.Tensor, tv: float) -> torch.Tensor:
        return update_loss(model, observed, broadcast.params, x, labels, steps, tv)

    return observed, label_counts(observed, rows_reached(config, update)), loss


def reconstruct(captured: Captured, client: int, settings: InvertingSettings) -> Reconstruction:
    """Inverting Gradients against ``client``'s message in ``captured``: labels recovered from the head's bias, then
    the inputs (:func:`update_objective`); scored against the client's training rows."""
    update, broadcast, config = captured.updates[client], captured.broadcast, captured.config
    model, _ = attacker_model(config, captured.shards.info.num_classes, broadcast.params)
    attacked, labels, loss = update_objective(update, broadcast, config, model)
    box = scores.model_box(*model.input_spec[1:])
    inversion = search(model, attacked, lambda x, tv: loss(x, labels, tv), len(labels), box, settings)
    read = None  # all the client's rows; a straggler cut in its first epoch read only its first batches'
    if rows_reached(config, update) < update.num_samples:
        read = np.concatenate(client_plan(captured, client)[: len(local_steps(config, update).batches)])
    return scored(captured, client, model, inversion.inputs, labels, inversion.loss, inversion.seconds, read)


def client_plan(captured: Captured, client: int) -> list[np.ndarray]:
    """The indices (among ``client``'s training rows) of the rows of each of its local steps in the round, in order:
    its own batch plan (:func:`~raysim.core.training.batch_plan`, from the run seed, the round and the client), read
    only to score."""
    config, data = captured.config, captured.shards.train(client)
    order = torch.Generator().manual_seed(derive_seed(config.federation.seed, Purpose.CLIENT, captured.round, client))
    epochs = batch_plan(len(data), config.train.batch_size, config.train.local_epochs, order)
    return [rows for epoch in epochs for rows in epoch]


def reconstruct_analytic(captured: Captured, client: int) -> Reconstruction:
    """APRIL's closed form against ``client``'s message (one row, full fine-tuning); the label from iDLG. Its loss is
    Inverting Gradients' cosine distance at the solution, without the prior."""
    update, broadcast, config = captured.updates[client], captured.broadcast, captured.config
    start = time.perf_counter()
    gradient = observed_gradient(update, broadcast, config)
    model, _ = attacker_model(config, captured.shards.info.num_classes, broadcast.params)
    rows = rows_reached(config, update)
    labels = recovered_labels(gradient, rows)
    inputs = embedding_inverse(gradient, position_prefix(model.vit), rows)
    seconds = time.perf_counter() - start
    with unfused_attention(model):
        loss = float(attack_loss(model, gradient, inputs, labels, tv=0.0).detach())
    return scored(captured, client, model, inputs, labels, loss, seconds)


def scored(
    captured: Captured, client: int, model, inputs, labels, loss: float, seconds: float, rows: np.ndarray | None = None
) -> Reconstruction:
    """The reconstruction ``inputs`` (with its ``labels``; None for an attack that recovers none) of ``client``'s
    training rows (or of those at indices ``rows``: one local step's), paired with and scored against them: the only
    place an attack reads a client's data."""
    _, mean, std = model.input_spec
    images = scores.to_pixels(inputs, mean, std)
    data = captured.shards.train(client)
    truth, true_labels = (data.images, data.labels) if rows is None else (data.images[rows], data.labels[rows])
    originals = scores.to_pixels(model_inputs(model, truth, torch.device("cpu")), mean, std)
    pairs = scores.matched(originals, images)
    originals, images = originals[[o for o, _ in pairs]], images[[r for _, r in pairs]]
    return Reconstruction(
        client,
        originals,
        images,
        [] if labels is None else [int(labels[r]) for _, r in pairs],
        [int(true_labels[o]) for o, _ in pairs],
        [scores.psnr(o, r) for o, r in zip(originals, images)],
        [scores.ssim(o, r) for o, r in zip(originals, images)],
        loss,
        seconds,
    )


FEATURE_MEAN = REPR  # the extra FedGCR, FedGC and FedGR clients send: h_tilde
GC_NET = ("gc_w1", "gc_b1", "gc_w2", "gc_b2")  # the GC-Net weights a FedGCR or FedGC client sends


def refuse_unless_feature_means(config: Config) -> None:
    """Refuse (one line) a method whose clients send no feature mean."""
    if FEATURE_MEAN not in getattr(get_method(config.method).cls, "extras_sent", {}):
        raise ConfigError(
            f"{config.method}'s clients send no feature mean; attack fedgcr, fedgc or fedgr (their h_tilde)"
        )


@dataclass
class FeatureReading:
    """One client's reading (:class:`~raysim.attacks.feature_means.FeatureInference`) and the images of its nearest
    public rows (uint8, nearest first), for its picture."""

    inference: FeatureInference
    nearest_images: np.ndarray


def public_rows(captured: Captured, client: int, limit: int | None = None) -> ClientData:
    """The attacker's public data: the test rows of every client but ``client``, in client order (rows of the
    distribution the attacker is assumed to hold); with a ``limit``, the clients' rows up to the first client that
    brings them to ``limit`` or more."""
    shards, pool, held = captured.shards, [], 0
    for other in range(shards.num_clients):
        if limit is not None and held >= limit:
            break
        if other != client:
            pool.append(shards.test(other))
            held += len(pool[-1])
    return ClientData.concat(pool)


def feature_net(config: Config, update: ClientUpdate) -> Tensors | None:
    """The GC-Net weights ``update`` sent beside its h_tilde, through which the client made its features from the
    frozen class token (FedGCR, FedGC); None where its features are the class token itself (FedGR)."""
    if not getattr(get_method(config.method).cls, "customize", False):
        return None
    return {name: update.params[f"extra.{name}"] for name in GC_NET}


def read_feature_means(captured: Captured, clients: list[int], k: int) -> list[FeatureReading]:
    """What the h_tilde of each of ``clients`` in ``captured`` reveals against a public pool, the test rows of every
    other client, their features made as the client made its own (the frozen class token cached for the run, then
    the GC-Net weights the client sent beside h_tilde); beside the other clients' most common type."""
    shards = captured.shards
    readings = []
    for client in clients:
        pool = public_rows(captured, client)
        if len(pool) < k:
            raise ConfigError(f"the public pool holds {len(pool)} rows, fewer than --k {k}; lower --k")
        tokens = torch.as_tensor(np.array(pool.features["cls"]), dtype=torch.float32)
        update = captured.updates[client]
        weights = feature_net(captured.config, update)
        public = gc_net(weights, tokens) if weights is not None else tokens
        types = shards.client_domain
        baseline = most_common(np.delete(types, client))
        h_tilde = update.extras[FEATURE_MEAN].float()
        found = read_off(client, h_tilde, public, pool, baseline, shards.train(client), int(types[client]), k)
        readings.append(FeatureReading(found, pool.images[found.nearest]))
    return readings
