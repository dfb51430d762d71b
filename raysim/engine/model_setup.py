"""The model's one build before round 1 (:func:`model_setup`): the method's options resolved on it, the initial
global state and the values the method caches per row (SGPT's frozen-backbone query). On the Ray backend the pool's
first worker runs it (``ClientWorker.model_setup``), so no other process imports the model code."""

from __future__ import annotations

import numpy as np
import torch

from raysim.base import seeding
from raysim.base.precision import autocast, full_width
from raysim.base.seeding import Init, Purpose
from raysim.config import Config
from raysim.core.messages import GlobalState
from raysim.core.protocol import CachesRowFeatures, ResolvesOptions
from raysim.core.registry import get_method
from raysim.core.training import PASS_BATCH, model_inputs
from raysim.data.npy_file import read_through
from raysim.data.shards import ShardStore
from raysim.engine.too_large import refused_if_too_large


def model_setup(
    config: Config, num_classes: int, rows: ShardStore | None, model=None
) -> tuple[object, GlobalState, dict[str, np.ndarray]]:
    """Build the model once: the method's options resolved on it, its initial global state, and the values the method
    caches for each of ``rows``' images (None: it caches none), in one batched pass (:func:`features_here`). The
    shards, not their image block, travel to a worker: a block in a file pickles as its path. ``model``: one already
    built from ``config``, whole and untrained, on the CPU (the first worker's own), used instead of a new build; it
    is left on the CPU."""
    method = get_method(config.method).cls(config)
    with refused_if_too_large(config.method):
        if model is None:
            from raysim.models.factory import build_model  # the model code: only in the process that builds the model

            model = build_model(config, method, num_classes)
    options = config.options
    if isinstance(method, ResolvesOptions):
        options = method.resolved_options(len(model.vit.blocks))
    generator = torch.Generator().manual_seed(
        seeding.derive_seed(config.federation.seed, Purpose.INIT, Init.GLOBAL_STATE)
    )
    features = {} if rows is None else features_here(method, model, rows.images, config)
    with refused_if_too_large(config.method):  # the server's own state too (pFedHN's hypernetwork)
        initial = method.init_global(model, generator)
    return options, initial, features


def trainable_count(state: GlobalState) -> float:
    """The number of trainable (communicated) parameters: what the run logs as ``trainable_params``."""
    return float(sum(t.numel() for t in state.params.values()))


def features_here(method: CachesRowFeatures, model, images: np.ndarray, config: Config) -> dict[str, np.ndarray]:
    """:func:`row_features` on the device the run's clients compute on (:func:`~raysim.models.factory.pick_device`),
    the model back on the CPU after and the GPU's cached blocks handed back. The model goes to a GPU for this pass
    alone."""
    from raysim.models.factory import pick_device

    device = pick_device(config.resources.gpus_per_client)
    with autocast(device, config.train.precision):
        features = row_features(method, model.to(device), images, device)
    model.cpu()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return features


@torch.no_grad()
def row_features(method: CachesRowFeatures, model, images: np.ndarray, device: torch.device) -> dict[str, np.ndarray]:
    """``method.row_features`` over every row of ``images`` (batched)."""
    out: dict[str, list[np.ndarray]] = {}
    for batch in read_through(images, PASS_BATCH):  # a mapped block's pages are not kept by the driver
        computed = method.row_features(model, model_inputs(model, batch, device))
        for name, values in computed.items():
            out.setdefault(name, []).append(full_width(values).cpu().numpy())
    return {name: np.concatenate(parts) for name, parts in out.items()}
