"""Turn raw uint8 images into the normalised float input a backbone expects (pure torch, no torchvision)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def to_model_input(images: torch.Tensor, size: int, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Scale, colour-expand, resize and normalise a batch of uint8 images.

    Args:
        images: uint8 ``[B, H, W]`` (grey) or ``[B, H, W, C]`` with ``C`` in {1, 3}.
        size: Output side length; images are resized (bilinear, no antialiasing, ``align_corners=False``)
            only when ``H`` or ``W`` differs from it.
        mean: Per-channel mean, applied after scaling to [0, 1].
        std: Per-channel standard deviation.

    Returns:
        float32 ``[B, 3, size, size]``.
    """
    x = _channels_first(images).to(torch.float32) / 255.0
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=False)
    x = x.expand(-1, 3, -1, -1)
    mean_t = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    return (x - mean_t) / std_t


def _channels_first(images: torch.Tensor) -> torch.Tensor:
    """``[B, C, H, W]`` view of a grey or channels-last uint8 batch, validating dtype and layout."""
    if images.dtype != torch.uint8:
        raise ValueError(f"images must be uint8, got {images.dtype}")
    if images.ndim == 3:
        return images.unsqueeze(1)
    if images.ndim == 4 and images.shape[-1] in (1, 3):
        return images.permute(0, 3, 1, 2)
    raise ValueError(f"images must be [B, H, W] or [B, H, W, C] with C in (1, 3), got shape {tuple(images.shape)}")
