"""Label recovery from the classifier's gradient, before any reconstruction.

For one row and cross-entropy, the gradient of the head's bias is p - onehot(y): negative in the true class only,
positive in every other (iDLG: Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020, which reads
the sign off the last layer's weight rows; the bias row gives it directly). For a batch of distinct labels the
averaged gradient is most negative in the batch's classes (Yin et al., "See through Gradients: Image Batch
Recovery via GradInversion", CVPR 2021, Section 3.2).
"""

from __future__ import annotations

import torch

from raysim.base.errors import ConfigError
from raysim.core.messages import Tensors

HEAD_BIAS = "vit.head.bias"


def recovered_labels(gradient: Tensors, rows: int) -> torch.Tensor:
    """The ``rows`` labels (sorted) whose head-bias gradient is most negative: iDLG's label for one row, the batch's
    classes for distinct labels."""
    if HEAD_BIAS not in gradient:
        raise ConfigError(f"label recovery reads the head's bias gradient, and the message holds no {HEAD_BIAS}")
    return torch.argsort(gradient[HEAD_BIAS])[:rows].sort().values
