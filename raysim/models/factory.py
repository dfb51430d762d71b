"""Build the model a method trains: frozen timm backbone + prompt wrapper, seeded from the run seed."""

from __future__ import annotations

import torch

from raysim.models.backbones import build_backbone, input_spec
from raysim.models.prompted import PromptedViT
from raysim.seeding import derive_seed


def build_model(config, method, num_classes: int) -> PromptedViT:
    """The method's model, bit for bit the same in every process that builds it from the same config."""
    seed = config.federation.seed
    vit = build_backbone(config.model.backbone, weights=config.model.weights,
                         pretrained=config.model.pretrained, seed=derive_seed(seed, "init", 0))
    spec = method.prompt_spec(len(vit.blocks))
    extras = method.extra_parameters(vit, torch.Generator().manual_seed(derive_seed(seed, "init", 3)))
    model = PromptedViT(vit, spec, num_classes, seed=derive_seed(seed, "init", 1), extras=extras)
    model.input_spec = input_spec(vit)
    return model.eval()
