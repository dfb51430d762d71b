"""FedMix's approximated global mixup (Yoon, Shin, Hwang, Yang, "FedMix: Approximation of Mixup under Mean Augmented
Federated Learning", ICLR 2021, Sec. 3): a pure function of a forward, a batch and the shared means."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F


def fedmix_loss(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    x_mean: torch.Tensor,
    y_mean: torch.Tensor,
    lam: float,
) -> torch.Tensor:
    """Mean over the batch of the first-order expansion in lam of the mixup loss l(f((1-lam) x + lam x_mean),
    (1-lam) y + lam y_mean) around s = (1-lam) x:

        (1-lam) CE(f(s), y)  +  lam CE(f(s), y_mean)  +  lam <d l1 / d s, x_mean>,   l1 = (1-lam) CE(f(s), y)

    per sample (the input gradient of each row's own loss; the authors' and Flower's code take it of the batch
    mean, 1/B as large). ``y_mean`` is a label distribution ``[K]``, ``x_mean`` an input ``x.shape[1:]``; the
    result is differentiable in ``forward``'s parameters (double backward through it).
    """
    s = ((1.0 - lam) * x).detach().requires_grad_(True)
    logits = forward(s)
    own = (1.0 - lam) * F.cross_entropy(logits, y, reduction="none")
    (grad,) = torch.autograd.grad(own.sum(), s, create_graph=True)
    shared = -(y_mean.to(logits) * F.log_softmax(logits, dim=1)).sum(dim=1)
    taylor = (grad * x_mean.to(grad)).flatten(1).sum(dim=1)
    return (own + lam * shared + lam * taylor).mean()
