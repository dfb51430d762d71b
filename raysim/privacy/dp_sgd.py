"""Record-level DP-SGD inside a client (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016): each
local step draws a batch of B of the client's n rows uniformly without replacement, independently of the other
steps; every row's gradient is clipped to L2 norm C (over all trained tensors as one vector); Gaussian noise of
standard deviation z C is added to the sum, which is divided by B; the client's optimiser steps on that. The
accounting of this sampling is :func:`raysim.privacy.accounting.record_event`.

Per-row gradients come from one backward pass per row through the method's own objective, so every objective
(cached row features, proximal terms, contrastive terms) is covered exactly as written, at the cost of B small
passes instead of one batched pass (docs/performance.md)."""

from __future__ import annotations

import numpy as np
import torch

from raysim.base.seeding import Purpose, derive_seed
from raysim.privacy.mechanisms import clip_factor


class DPSGD:
    """One client's DP-SGD for a round: its batch plan and its private step, its noise drawn from its seed."""

    def __init__(self, noise_multiplier: float, clip: float, client_seed: int):
        self.noise_multiplier, self.clip = noise_multiplier, clip
        self.generator = torch.Generator().manual_seed(derive_seed(client_seed, Purpose.PRIVACY))

    @staticmethod
    def plan(n: int, batch_size: int, epochs: int, generator: torch.Generator) -> list[list[np.ndarray]]:
        """ceil(n / B) steps per epoch, each B rows (all n when n < B) drawn uniformly without replacement."""
        take = min(batch_size, n)
        return [
            [torch.randperm(n, generator=generator)[:take].numpy() for _ in range(-(-n // batch_size))]
            for _ in range(epochs)
        ]

    def step(self, optimizer, params: list[torch.Tensor], objective, x, y, rows: np.ndarray) -> torch.Tensor:
        """One private step on the batch ``(x, y, rows)``; returns the batch's mean loss (before the step)."""
        total = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
        losses = []
        for i in range(len(rows)):
            loss = objective(x[i : i + 1], y[i : i + 1], rows[i : i + 1])
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            grads = [
                torch.zeros(p.shape, dtype=torch.float64) if g is None else g.detach().double().cpu()
                for p, g in zip(params, grads)
            ]
            norm = float(torch.sqrt(sum(g.square().sum() for g in grads)))
            factor = clip_factor(norm, self.clip)
            for acc, g in zip(total, grads):
                acc.add_(g, alpha=factor)
            losses.append(loss.detach())
        std = self.noise_multiplier * self.clip
        for p, acc in zip(params, total):
            noisy = acc + torch.randn(acc.shape, generator=self.generator, dtype=torch.float64) * std
            p.grad = (noisy / len(rows)).to(device=p.device, dtype=p.dtype)
        optimizer.step()
        return torch.stack(losses).mean()
