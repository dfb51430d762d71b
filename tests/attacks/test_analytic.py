"""APRIL's closed form recovers the one row of a full fine-tuning update of a ViT, and refuses what it cannot read."""

from __future__ import annotations

import pytest
import torch

from raysim.attacks.analytic import embedding_inverse
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
    found = embedding_inverse(gradient, model.vit.num_prefix_tokens, rows=1)
    assert found.shape == x.shape
    assert torch.allclose(found, x, atol=1e-2)


def test_a_prompt_update_and_a_batch_are_refused():
    x = torch.zeros(1, 3, 16, 16)
    gradient, model = one_row_update("fedvpt", x, label=0)
    with pytest.raises(ConfigError, match="holds no vit.patch_embed.proj.weight"):
        embedding_inverse(gradient, model.vit.num_prefix_tokens, rows=1)
    full, model = one_row_update("fedavg", x, label=0)
    with pytest.raises(ConfigError, match="one row, and the client trained on 2"):
        embedding_inverse(full, model.vit.num_prefix_tokens, rows=2)
