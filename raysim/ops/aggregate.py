"""Server-side aggregation as pure functions of tensors (Flower's ``aggregate.py`` style)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

Tensors = dict[str, torch.Tensor]


def normalised_weights(weights: Sequence[float]) -> torch.Tensor:
    """Weights scaled to sum to 1 (float64, so the order of clients does not matter to 1e-15)."""
    w = torch.as_tensor(list(weights), dtype=torch.float64)
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"aggregation weights must be finite and >= 0 with a positive sum, got {w.tolist()}")
    return w / w.sum()


def weighted_mean(updates: Sequence[Tensors], weights: Sequence[float]) -> Tensors:
    """sum_i w_i * update_i / sum_i w_i for every key (FedAvg with w_i = N_i)."""
    w = normalised_weights(weights)
    out = {}
    for key in updates[0]:
        stacked = torch.stack([u[key].to(torch.float64) for u in updates])
        mean = torch.tensordot(w, stacked, dims=1)
        out[key] = mean.to(updates[0][key].dtype)
    return out


def tensor_bytes(tensors: Tensors) -> int:
    """Bytes a dict of tensors occupies on the wire (element size times count)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())
