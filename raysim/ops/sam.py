"""Sharpness-aware minimisation (Foret et al., ICLR 2021): FedSAM's local step (Qu et al., ICML 2022) and HarmoFL's
weight perturbation (Jiang, Wang, Dou, AAAI 2022), which is the same step with radius alpha.

    g = grad l(w);  eps = radius * g / (||g||_2 + 1e-12);  g' = grad l(w + eps);  w <- BaseStep(w, g')

The norm is over all trained tensors together; the base optimiser steps from the unperturbed w.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

NORM_EPS = 1e-12


def ascent(grads: list[torch.Tensor], radius: float) -> list[torch.Tensor]:
    """eps = radius * g / (||g||_2 + 1e-12), the norm over every tensor of ``grads`` together."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    return [g * (radius / (norm + NORM_EPS)) for g in grads]


def sam_step(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor], closure: Callable[[], torch.Tensor], radius: float
) -> torch.Tensor:
    """One SAM update of ``params``; returns the loss at the unperturbed weights. Tensors without a gradient are
    neither perturbed nor counted in the norm (as davda54/sam, the code FedGCR's and HarmoFL's authors use)."""
    optimizer.zero_grad(set_to_none=True)
    loss = closure()
    loss.backward()
    moved = [p for p in params if p.grad is not None]
    with torch.no_grad():
        saved = [p.detach().clone() for p in moved]
        for p, eps in zip(moved, ascent([p.grad for p in moved], radius), strict=True):
            p.add_(eps)
    optimizer.zero_grad(set_to_none=True)
    closure().backward()
    with torch.no_grad():
        for p, old in zip(moved, saved, strict=True):
            p.copy_(old)
    optimizer.step()
    return loss
