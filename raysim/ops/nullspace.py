"""FedPR's null-space projection (Feng et al., "Learning Federated Visual Prompt in Null Space for MRI
Reconstruction", CVPR 2023): local prompt updates are restricted to the approximate null space of the global
prompt's uncentred covariance, so they leave what the global prompt encodes alone."""

from __future__ import annotations

import math

import torch


def null_space_projector(prompt: torch.Tensor, ratio: float, normalise: bool = True) -> torch.Tensor:
    """``[D, D]`` T for a global prompt ``[L, D]``: G = P^T P = V S V^T (singular values descending), the first
    r = floor(D (1 - ratio)) columns of V dropped, B = V[:, r:], T = B B^T, divided by ||B B^T||_F when
    ``normalise`` (the authors' ``adam_svd.py``; it shrinks the step by sqrt(D - r)). An update row u becomes u T.
    The floor is exact where D (1 - ratio) is whole (1 - 0.8 is 0.19999... in floats: the authors' ``int()`` drops
    one direction fewer at D = 10)."""
    p = prompt.double()
    dropped = math.floor(p.shape[1] * (1.0 - ratio) + 1e-9)
    basis = torch.linalg.svd(p.T @ p).U[:, dropped:]
    t = basis @ basis.T
    return (t / torch.linalg.matrix_norm(t) if normalise else t).to(prompt.dtype)
