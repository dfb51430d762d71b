"""Label recovery from the classifier's bias, before any reconstruction.

For one row and cross-entropy, the gradient of the head's bias is p - onehot(y): negative in the true class only,
positive in every other (iDLG: Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020, which reads
the sign off the last layer's weight rows; the bias row gives it directly). For a batch of distinct labels the
averaged gradient is most negative in the batch's classes (Yin et al., "See through Gradients: Image Batch
Recovery via GradInversion", CVPR 2021, Section 3.2).

Over several SGD steps each moves the bias by -eta mean_i (p_i - onehot(y_i)), so in the update w_T - w_0 a class
the rows hold rises by about eta / b for each of its rows and step, above the common drift of the classes no row
holds (:func:`label_counts`).
"""

from __future__ import annotations

import numpy as np
import torch

from raysim.base.errors import ConfigError
from raysim.core.messages import Tensors

HEAD_BIAS = "vit.head.bias"


def head_bias(tensors: Tensors) -> torch.Tensor:
    """The head bias's tensor in ``tensors`` (a gradient or an update), or a one-line error when the message has
    none."""
    if HEAD_BIAS not in tensors:
        raise ConfigError(f"label recovery reads the head's bias, and the message holds no {HEAD_BIAS}")
    return tensors[HEAD_BIAS]


def recovered_labels(gradient: Tensors, rows: int) -> torch.Tensor:
    """The ``rows`` labels (sorted, with repeats) of one step's ``gradient``: iDLG's, the most negative head-bias
    entry, for one row; for a batch, the counts read off the bias's descent direction (:func:`label_counts`), which
    holds Yin et al.'s most negative entries for distinct labels and repeats a label several rows hold."""
    if rows == 1:
        return torch.argmin(head_bias(gradient)).reshape(1)
    return label_counts({HEAD_BIAS: -head_bias(gradient)}, rows)


def label_counts(update: Tensors, rows: int) -> torch.Tensor:
    """The ``rows`` labels (sorted, with repeats) read off the head bias's update w_T - w_0 in ``update``: each
    class's rise above the common drift of the classes no row holds (the median of the classes that did not rise:
    those only move down), shared out in proportion, the rounding by largest remainders."""
    bias = head_bias(update)
    fell = bias[bias <= 0]
    rise = (bias - (fell.median() if len(fell) else bias.min())).clamp(min=0).double().numpy()
    if rise.sum() <= 0:
        raise ConfigError("the head's bias did not move: no label can be read off this update")
    share = rise / rise.sum() * rows
    counts = np.floor(share).astype(int)
    for c in np.argsort(-(share - counts), kind="stable")[: rows - counts.sum()]:
        counts[c] += 1
    return torch.tensor(np.repeat(np.arange(len(counts)), counts))
