"""The closed-form attack on a vision transformer's embedding (APRIL: Lu, Huang, Chen, Xia, Wang, Zhang, "APRIL:
Finding the Achilles' Heel on Privacy for Vision Transformers", CVPR 2022, Section 3.2).

A ViT embeds patch p of the input as e_p = W x_p + b + pos_p, with a learned position embedding added to the patch
embedding. For one row, the gradient of the loss in pos_p is therefore the gradient in e_p, delta_p, and the
gradient in W is sum_p delta_p x_p^T. With D (the width) at least the number of patches N, the N x D matrix of
the delta_p has full row rank in general, and the patches are the least-squares solution of Delta^T X = dL/dW:
the input itself, up to rounding, from any update that carries the patch and position embeddings' gradients
(full fine-tuning: FedAvg), whatever the rest of the network.
"""

from __future__ import annotations

import torch

from raysim.base.errors import ConfigError
from raysim.core.messages import Tensors

PATCH_WEIGHT, POSITIONS = "vit.patch_embed.proj.weight", "vit.pos_embed"


def position_prefix(vit) -> int:
    """The rows of ``vit``'s position embedding ahead of its patches' rows: its class and register tokens', none
    where it embeds them apart (timm's ``no_embed_class``: DeiT III, the register models)."""
    return vit.pos_embed.shape[1] - vit.patch_embed.num_patches


def refuse_without_embeddings(names, whose: str) -> None:
    """Refuse (one line) an attack on a message without the patch and position embeddings' gradients: ``names``
    are the tensors it holds (or those ``whose`` clients train, before a replay)."""
    missing = [name for name in (PATCH_WEIGHT, POSITIONS) if name not in names]
    if missing:
        raise ConfigError(
            f"APRIL reads the gradients of the patch and position embeddings, and {whose} no {missing[0]} "
            "(only full fine-tuning sends them: fedavg)"
        )


def embedding_inverse(gradient: Tensors, prefix_tokens: int, rows: int) -> torch.Tensor:
    """The one input ``[1, C, H, W]`` (the model's input space) whose patch- and position-embedding gradients are
    those in ``gradient``; ``prefix_tokens``: the position embedding's rows ahead of the patches'
    (:func:`position_prefix`). Refused where the patches' gradients have rank below their number (a width under
    the number of patches): the least-squares solution is then not the input."""
    refuse_without_embeddings(gradient, "the message holds")
    if rows != 1:
        raise ConfigError(f"APRIL's closed form inverts an update of one row, and the client trained on {rows}")
    weight = gradient[PATCH_WEIGHT]
    width, channels, patch, _ = weight.shape
    delta = gradient[POSITIONS][0, prefix_tokens:]
    rank = int(torch.linalg.matrix_rank(delta.double()))
    if rank < len(delta):
        raise ConfigError(
            f"APRIL solves for the {len(delta)} patches from their position gradients, whose rank here is {rank} "
            f"(width {width}): the input is not determined; it needs a backbone at least as wide as it has patches"
        )
    patches = torch.linalg.lstsq(delta.T.double(), weight.reshape(width, -1).double()).solution.float()
    side = round(len(patches) ** 0.5)
    return fold_patches(patches.unsqueeze(0), channels, patch, (side, side))


def fold_patches(patches: torch.Tensor, channels: int, patch: int, grid: tuple[int, int]) -> torch.Tensor:
    """Patches ``[B, N, C p p]`` (row-major over the grid, each flattened as a patch embedding's weight is,
    channel first) to images ``[B, C, rows p, columns p]``."""
    rows, columns = grid
    shaped = patches.reshape(len(patches), rows, columns, channels, patch, patch)
    return shaped.permute(0, 3, 1, 4, 2, 5).reshape(len(patches), channels, rows * patch, columns * patch)
