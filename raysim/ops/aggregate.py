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


def row_masked_mean(
    updates: Sequence[Tensors], weights: Sequence[float], trained: Sequence[Tensors], previous: Tensors
) -> Tensors:
    """FedAvg over the clients that trained each row (capacity tiers): for every key and row r,
    sum_i w_i m_i[r] update_i[r] / sum_i w_i m_i[r], where the boolean m_i[r] (``trained[i][key]``; absent: every
    row) says whether client i trained row r of that tensor; a row no client trained keeps ``previous``."""
    w = normalised_weights(weights)
    out = {}
    for key, ref in previous.items():
        rows = ref.shape[0] if ref.dim() else 1
        masks = torch.stack([t[key] if key in t else torch.ones(rows, dtype=torch.bool) for t in trained])
        share = w[:, None] * masks.to(torch.float64)  # [clients, rows]
        total = share.sum(dim=0)
        stacked = torch.stack([u[key].to(torch.float64).reshape(rows, -1) for u in updates])  # [clients, rows, rest]
        mean = torch.einsum("cr,crk->rk", share, stacked) / total.clamp_min(1e-300)[:, None]
        kept = torch.where(total[:, None] > 0, mean, previous[key].to(torch.float64).reshape(rows, -1))
        out[key] = kept.reshape(ref.shape).to(ref.dtype)
    return out


def tensor_bytes(tensors: Tensors) -> int:
    """Bytes a dict of tensors occupies on the wire (element size times count)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())
