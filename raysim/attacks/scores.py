"""How close a reconstruction is to the client's input: PSNR and SSIM from scikit-image, in pixels in [0, 1].

A batch's reconstructions come in an order of their own (the attack never sees the rows), so each is scored against
the original it is closest to, one to one (the assignment of highest total PSNR, as attack papers report it); when
the client holds more rows than the attacked batch, the rows left unpaired are not scored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from skimage.metrics import peak_signal_noise_ratio, structural_similarity


def model_box(mean: Sequence[float], std: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """The lowest and highest model input of each channel ``[1, C, 1, 1]``: pixels 0 and 1 normalised."""
    mean_t, std_t = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    return (0 - mean_t) / std_t, (1 - mean_t) / std_t


def to_pixels(inputs: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Model inputs ``[B, C, H, W]`` back to images ``[B, H, W, C]`` in [0, 1]."""
    mean_t, std_t = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    return (inputs.detach().cpu() * std_t + mean_t).clamp(0, 1).permute(0, 2, 3, 1).numpy().astype(np.float64)


def row_pixels(images: np.ndarray) -> np.ndarray:
    """A shard's uint8 rows as images ``[N, H, W, 3]`` in [0, 1] at their own size (grey expanded), for pictures."""
    from raysim.base.preprocess import to_model_input

    plain = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return to_pixels(to_model_input(torch.as_tensor(np.array(images)), images.shape[1], *plain), *plain)


def psnr(original: np.ndarray, reconstruction: np.ndarray) -> float:
    """PSNR in dB for images in [0, 1]; infinite (without a warning) for an exact copy."""
    with np.errstate(divide="ignore"):
        return float(peak_signal_noise_ratio(original, reconstruction, data_range=1.0))


def ssim(original: np.ndarray, reconstruction: np.ndarray) -> float:
    return float(structural_similarity(original, reconstruction, data_range=1.0, channel_axis=-1))


def matched(originals: np.ndarray, reconstructions: np.ndarray) -> list[tuple[int, int]]:
    """(original, reconstruction) index pairs, one to one, in the originals' order: the pairing of highest total
    PSNR, which pairs min(len(originals), len(reconstructions)) of each (an exact copy, of infinite PSNR, first)."""
    table = np.array([[psnr(o, r) for r in reconstructions] for o in originals])
    rows, columns = linear_sum_assignment(np.nan_to_num(table, posinf=1e6), maximize=True)  # any finite PSNR < 1e3
    return sorted((int(o), int(r)) for o, r in zip(rows, columns))


def patches_placed(original: np.ndarray, reconstruction: np.ndarray, patch: int) -> np.ndarray:
    """``reconstruction`` ``[H, W, C]`` with its ``patch`` x ``patch`` tiles moved, one to one, to the places of the
    ``original``'s tiles they are closest to (least total squared error): a diagnostic that reads the original, never
    an attack. A vision transformer's gradient changes little when its patches trade places, so a gradient inversion
    can recover the patches and miss their places; PSNR after placing tells the two apart."""
    height, width, channels = original.shape
    rows, columns = height // patch, width // patch

    def tiles(image: np.ndarray) -> np.ndarray:
        grid = image[: rows * patch, : columns * patch].reshape(rows, patch, columns, patch, channels)
        return grid.transpose(0, 2, 1, 3, 4).reshape(rows * columns, -1)

    ours, theirs = tiles(original), tiles(reconstruction)
    cost = ((ours[:, None, :] - theirs[None, :, :]) ** 2).sum(-1)
    places, chosen = linear_sum_assignment(cost)
    placed = theirs[chosen[np.argsort(places)]].reshape(rows, columns, patch, patch, channels)
    result = reconstruction.copy()
    result[: rows * patch, : columns * patch] = placed.transpose(0, 2, 1, 3, 4).reshape(rows * patch, -1, channels)
    return result
