"""APRIL's closed form recovers the one row of a full fine-tuning update of a ViT, and refuses what it cannot read."""

from __future__ import annotations

import pytest
import torch

from raysim.attacks.analytic import embedding_inverse, position_prefix
from raysim.attacks.observed import observed_gradient
from raysim.base.errors import ConfigError
from raysim.core.messages import Broadcast, ClientUpdate
from raysim.core.registry import get_method
from raysim.models.factory import build_model
from raysim.testing.smoke import smoke_config


def one_row_update(method: str, x: torch.Tensor, label: int):
    """The gradient the server reads off ``method``'s one-row SGD update on the tests' nano ViT, and the model."""
    config = smoke_config(method, {"train": {"optimizer": "sgd", "lr": 0.01, "weight_decay": 1e-4}})
    model = build_model(config, get_method(method).cls(config), 4).train()
    start = model.trainable_state()
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9, weight_decay=1e-4
    )
    torch.nn.functional.cross_entropy(model(x), torch.tensor([label])).backward()
    optimizer.step()
    update = ClientUpdate(0, 1, model.trainable_state(), metrics={"steps": 1})
    return observed_gradient(update, Broadcast(start), config), model


def test_the_row_of_a_fedavg_update_is_solved_from_the_embeddings_gradients():
    x = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    gradient, model = one_row_update("fedavg", x, label=2)
    found = embedding_inverse(gradient, position_prefix(model.vit), rows=1)
    assert found.shape == x.shape
    assert torch.allclose(found, x, atol=1e-2)


def test_a_prompt_update_and_a_batch_are_refused():
    x = torch.zeros(1, 3, 16, 16)
    gradient, model = one_row_update("fedvpt", x, label=0)
    with pytest.raises(ConfigError, match="holds no vit.patch_embed.proj.weight"):
        embedding_inverse(gradient, position_prefix(model.vit), rows=1)
    full, model = one_row_update("fedavg", x, label=0)
    with pytest.raises(ConfigError, match="one row, and the client trained on 2"):
        embedding_inverse(full, position_prefix(model.vit), rows=2)


def test_a_vit_that_embeds_its_class_token_apart_is_solved_too():
    """timm's ``no_embed_class`` (DeiT III, the register models): the position embedding covers the patches alone."""
    from timm.models.vision_transformer import VisionTransformer

    vit = VisionTransformer(
        img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, num_classes=3, no_embed_class=True, reg_tokens=1
    )
    x = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.nn.functional.cross_entropy(vit(x), torch.tensor([1])).backward()
    gradient = {f"vit.{name}": p.grad for name, p in vit.named_parameters()}
    assert position_prefix(vit) == 0 and vit.num_prefix_tokens == 2
    assert torch.allclose(embedding_inverse(gradient, position_prefix(vit), rows=1), x, atol=1e-3)


def test_a_backbone_narrower_than_its_patches_is_refused():
    """With the width D below the number of patches N, the patches' gradients have rank at most D: the
    least-squares solution is another input than the row."""
    delta = torch.randn(1, 1 + 16, 8)  # the class token, 16 patches, width 8
    gradient = {"vit.pos_embed": delta, "vit.patch_embed.proj.weight": torch.randn(8, 3, 2, 2)}
    with pytest.raises(ConfigError, match="16 patches from their position gradients, whose rank here is 8"):
        embedding_inverse(gradient, 1, rows=1)
