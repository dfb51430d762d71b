"""The Gaussian mechanism on named tensors: L2 norms over a message, clipping, seeded noise, and adaptive clipping's
update (Andrew et al., "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021). Pure functions in
float64, so the order of clients never changes a sum beyond rounding of float64."""

from __future__ import annotations

import math

import torch

from raysim.core.messages import Tensors


def l2_norm(tensors: Tensors) -> float:
    """The L2 norm of every tensor of ``tensors`` taken as one flat vector."""
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors.values()))


def clip_factor(norm: float, bound: float) -> float:
    """min(1, bound / norm): the scale that brings a vector of L2 norm ``norm`` within ``bound``."""
    return 1.0 if norm <= bound else bound / norm


def clipped(tensors: Tensors, bound: float) -> tuple[Tensors, float]:
    """``tensors`` (as one flat vector) scaled to L2 norm at most ``bound``, in float64, and their norm before."""
    norm = l2_norm(tensors)
    factor = clip_factor(norm, bound)
    return {name: t.double() * factor for name, t in tensors.items()}, norm


def gaussian(like: Tensors, std: float, generator: torch.Generator) -> Tensors:
    """Independent N(0, std^2) noise of each tensor's shape, float64, drawn in the sorted order of ``like``'s keys."""
    return {
        name: torch.randn(t.shape, generator=generator, dtype=torch.float64) * std for name, t in sorted(like.items())
    }


def next_clip(clip: float, unclipped_share: float, quantile: float, lr: float) -> float:
    """Adaptive clipping's geometric update C <- C exp(-eta (b - gamma)): ``unclipped_share`` b is the (noised) share
    of the cohort whose update norm was at most C, ``quantile`` gamma the target share, ``lr`` eta (Andrew et al.,
    Algorithm 1): C shrinks while more than gamma of the clients fit under it, and grows while fewer do."""
    return clip * math.exp(-lr * (unclipped_share - quantile))
