"""Build the model a method trains: frozen timm backbone + prompt wrapper, seeded from the run seed."""

from __future__ import annotations

import torch

from raysim.base.seeding import Init, Purpose, derive_seed
from raysim.models.backbones import build_backbone, input_spec
from raysim.models.prompted import PromptedViT


def build_model(config, method, num_classes: int) -> PromptedViT:
    """``method``'s model (its :meth:`~raysim.core.protocol.Method.parts` on the configured backbone), bit for bit
    the same in every process that builds it from the same config."""
    seed = config.federation.seed
    vit = build_backbone(
        config.model.backbone,
        weights=config.model.weights,
        pretrained=config.model.pretrained,
        seed=derive_seed(seed, Purpose.INIT, Init.BACKBONE),
    )
    with torch.random.fork_rng(devices=[]):  # the wrapper draws the head; this one only tells parts the classes
        vit.reset_classifier(num_classes)
    parts = method.parts(vit, torch.Generator().manual_seed(derive_seed(seed, Purpose.INIT, Init.EXTRAS)))
    model = PromptedViT(
        vit, parts.spec, num_classes, seed=derive_seed(seed, Purpose.INIT, Init.WRAPPER), extras=parts.extras
    )
    model.input_spec = input_spec(vit)
    return model.eval()


def pick_device(gpus: float) -> torch.device:
    """The GPU this process sees when it takes ``gpus`` > 0 of one (``resources.gpus_per_client`` for the clients,
    ``server_gpus`` for split learning's server; on Ray, the one Ray assigned), else the CPU: a run that reserves no
    GPU computes on the CPU on every backend, also where the sequential backend's process would see one."""
    return torch.device("cuda") if gpus > 0 and torch.cuda.is_available() else torch.device("cpu")
