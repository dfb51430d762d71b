"""Smashed-data inversion: the inputs of a split-learning client from the cut-layer features its server receives.

A split-learning client (FedV, FedVZ, FESTA) sends h = H(x), its head's output (the patch and position embedding,
and ``head_blocks`` blocks), at every local step. The server does not hold the client's head; the attacker takes a
prior for it (the head the server averaged and broadcast, which a client starts its round from, or the public
pretrained one) and searches the input whose features through that head are the observed ones (the optimisation
attack of model inversion against split learning: He, Zhang, Lee, "Model inversion attacks against collaborative
inference", ACSAC 2019, Section 4, white-box regularised maximum likelihood):

    x* = argmin_{x in [lo, hi]}  ||H(x) - h||^2 / ||h||^2  +  alpha TV(x)

by Adam from the mean input, its step decayed by a cosine schedule, kept in the data's range after every step. FedVZ's
zeroth-order server step changes what the server computes, not what it receives: its clients send the same h.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from raysim.attacks.inverting import Inversion, total_variation
from raysim.attacks.progress import steps


@dataclass(frozen=True)
class SmashedSettings:
    """The search's budget and prior: Adam's ``iterations`` and step ``lr``, the weight ``tv`` of total variation."""

    iterations: int = 500
    lr: float = 0.1
    tv: float = 1e-4


def feature_distance(features: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """||features - observed||^2 / ||observed||^2 over the whole batch."""
    return (features - observed).pow(2).sum() / observed.pow(2).sum()


def invert_smashed(
    head: Callable[[torch.Tensor], torch.Tensor],
    observed: torch.Tensor,
    shape: tuple[int, int, int],
    box: tuple[torch.Tensor, torch.Tensor],
    settings: SmashedSettings = SmashedSettings(),
) -> Inversion:
    """Reconstruct the ``len(observed)`` inputs (each ``shape``, ``[C, H, W]``) whose features through ``head`` are
    ``observed`` ``[B, T, D]``; ``box``: the lowest and highest value of each channel (``[1, C, 1, 1]``)."""
    start = time.perf_counter()
    low, high = box
    x = ((low + high) / 2).expand(len(observed), *shape).clone().requires_grad_(True)
    optimizer = torch.optim.Adam([x], lr=settings.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, settings.iterations)
    loss = torch.tensor(float("nan"))
    with steps("feature search: iteration", settings.iterations) as step:
        for _ in range(settings.iterations):
            optimizer.zero_grad(set_to_none=True)
            loss = feature_distance(head(x), observed) + settings.tv * total_variation(x)
            loss.backward()
            optimizer.step()
            schedule.step()
            with torch.no_grad():
                x.copy_(torch.maximum(torch.minimum(x, high), low))
            step()
    return Inversion(x.detach(), float(loss.detach()), time.perf_counter() - start)
