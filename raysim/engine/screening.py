"""Screening what the server receives: every channel of a client's update is checked before aggregation (shapes,
NaN/Inf, declared names), so one poisoned or broken client costs its update, not the run."""

from __future__ import annotations

import numpy as np
import torch

from raysim.core.messages import ClientUpdate, Tensors


def bad_tensor(name: str, tensor: torch.Tensor, shape: tuple | None) -> str | None:
    """Why one received tensor is unusable (wrong shape, NaN/Inf), or None."""
    if shape is not None and tuple(tensor.shape) != tuple(shape):
        return f"{name}: expected shape {tuple(shape)}, got shape {tuple(tensor.shape)}"
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        return f"{name} has NaN or Inf"
    return None


def bad_mask(mask: torch.Tensor, shape: torch.Size) -> bool:
    """Whether a capacity tier's ``trained`` mask is not one boolean per row of a tensor of ``shape``."""
    return mask.dtype != torch.bool or tuple(mask.shape) != tuple(shape[:1])


def screen(
    updates: list[ClientUpdate],
    params: Tensors,
    extras: dict[str, tuple] | None = None,
    states: dict[int, Tensors] | None = None,
) -> tuple[list[ClientUpdate], dict[int, str]]:
    """Split off poisoned updates: every channel a client sends is checked.

    ``params`` must be exactly the global tensors, with their shapes, and a capacity tier's ``trained`` masks one
    boolean per row of a global tensor; ``extras`` only the declared names, each with
    its declared shape (``extras`` None: none may be sent); scalar metrics finite (aggregation reads some: losses,
    FedVZ's SPSA coefficient) for a client that trained; the new state free of NaN/Inf and, where the client kept a
    state before, of its shapes. Returns the updates to use and, per rejected client, why (one line naming it).
    """
    declared = extras or {}
    kept, rejected = [], {}
    for update in updates:
        previous = (states or {}).get(update.client_id) or {}
        problems = [
            f"params {name}: expected shape {tuple(ref.shape)}, got nothing"
            for name, ref in params.items()
            if name not in update.params
        ]
        problems += [
            f"params {name} is not a global parameter"
            if name not in params
            else bad_tensor(f"params {name}", t, params[name].shape)
            for name, t in update.params.items()
        ]
        problems += [
            f"trained {name} is not a global parameter"
            if name not in params
            else f"trained {name}: expected a boolean mask of {params[name].shape[0]} rows"
            if bad_mask(mask, params[name].shape)
            else None
            for name, mask in update.trained.items()
        ]
        problems += [
            f"extra {name} is not one the method declares"
            if name not in declared
            else bad_tensor(f"extra {name}", t, declared[name])
            for name, t in update.extras.items()
        ]
        if update.num_samples > 0:
            problems += [
                f"metric {name} is {value}" for name, value in update.metrics.items() if not np.isfinite(value)
            ]
        problems += [
            bad_tensor(f"state {name}", t, previous[name].shape if name in previous else None)
            for name, t in (update.state or {}).items()
        ]
        reason = next((p for p in problems if p), None)
        if reason:
            rejected[update.client_id] = f"client {update.client_id} ({reason})"
        else:
            kept.append(update)
    return kept, rejected
