"""What a method declares about its prompts (:class:`PromptSpec`: the slots, the head's pooling, what trains),
read by :class:`~raysim.models.prompted.PromptedViT`. No model code here: the coordinator looks methods up without
importing timm, and the methods' options (declared in :mod:`raysim.algorithms`) read :data:`POOLINGS` without torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from timm.models.vision_transformer import VisionTransformer

MODES = ("insert", "replace")
INITS = ("zeros", "xavier", "normal")
POOLINGS = ("backbone", "cls", "cls+prompts")


@dataclass(frozen=True)
class PromptSlot:
    """A group of prompt tokens entering the sequence before some blocks.

    Attributes:
        name: Identifier; the stored parameter is ``prompts.<name>`` with shape ``[len(blocks), length, D]``.
        blocks: Strictly increasing block indices before which this slot's tokens enter.
        length: Tokens per block.
        mode: "insert": at each listed block new tokens join and earlier prompt outputs stay, so the sequence
            grows (SGPT authors' code; VPT-shallow is insert at block 0). "replace": VPT-deep; tokens enter at
            the first listed block and at each later one replace this slot's outputs of the previous block.
        init: "zeros"; "xavier": uniform with VPT's bound ``sqrt(6 / (C * patch_h * patch_w + D))``;
            "normal": std 0.02.
        dynamic: Tokens are given per sample at forward time (shape ``[B, len(blocks), length, D]``), e.g.
            selected from a bank of group prompts; nothing is stored and ``init`` is unused. A forward that
            does not give them runs without this slot (SGPT's Block I).
    """

    name: str
    blocks: tuple[int, ...]
    length: int = 1
    mode: str = "insert"
    init: str = "xavier"
    dynamic: bool = False


@dataclass(frozen=True)
class PromptSpec:
    """What is prompted, how the head pools, and what trains.

    Attributes:
        slots: The prompt slots.
        head_pooling: "backbone": timm's own pooling (``forward_head``) over prefix and patch tokens, prompts
            removed, so with no slots it equals timm's forward. "cls": the class token after the final norm.
            "cls+prompts": mean of the class token and all prompt outputs (SGPT's head input). The two
            "cls" forms pass through ``fc_norm``, ``head_drop`` and ``head`` as timm's head does.
        train_backbone: Also train every backbone parameter (full fine-tuning, the FedAvg baseline).
        train_head: Train the linear classifier ``vit.head``.
    """

    slots: tuple[PromptSlot, ...] = ()
    head_pooling: str = "backbone"
    train_backbone: bool = False
    train_head: bool = True


def xavier_prompt(
    vit: VisionTransformer, shape: tuple[int, ...], generator: torch.Generator | None = None
) -> torch.Tensor:
    """Uniform draws in VPT's Xavier range ``+-sqrt(6 / (C * patch_h * patch_w + D))`` (Jia et al., 2022)."""
    import torch  # here: the module is read where torch is not imported (see above)

    bound = math.sqrt(6.0 / (vit.in_chans * math.prod(vit.patch_embed.patch_size) + vit.embed_dim))
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)
