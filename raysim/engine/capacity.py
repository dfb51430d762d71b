"""Capacity tiers on the client side (docs/systems.md): which rows of the trainable tensors a client of a tier trains,
and the update it then sends (only those rows count and are averaged; the others are the broadcast's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from raysim.core.messages import Broadcast, ClientUpdate
from raysim.systems.tiers import ALL, trains_block

if TYPE_CHECKING:
    from raysim.models.prompted import PromptedViT


def tier_rows(model: PromptedViT, tier: str) -> dict[str, torch.Tensor]:
    """Per trainable tensor a client of ``tier`` does not train in full, a boolean mask over its rows (first
    dimension): prompt rows by the block they enter, the head always, every other tensor under ``all`` only."""
    if tier == ALL:
        return {}
    depth, blocks = len(model.vit.blocks), model.prompt_blocks()
    params = dict(model.named_parameters())
    rows = {}
    for name in model.trainable_names():
        if name.startswith("vit.head."):
            continue
        if name in blocks:
            mask = torch.tensor([trains_block(tier, b, depth) for b in blocks[name]])
        else:
            mask = torch.zeros(params[name].shape[0], dtype=torch.bool)
        if not mask.all():
            rows[name] = mask
    return rows


def sent_rows(update: ClientUpdate, broadcast: Broadcast, rows: dict[str, torch.Tensor]) -> None:
    """Make ``update`` what a client of a tier sends: the rows it did not train hold the broadcast's values (never
    what the optimiser's weight decay made of them) and ``trained`` marks the rows it did."""
    for name, mask in rows.items():
        update.params[name][~mask] = broadcast.params[name][~mask]
    update.trained = rows
