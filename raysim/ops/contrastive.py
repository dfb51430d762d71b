"""FedGCR's contrastive terms (Zheng et al., AAAI 2024): the class-balanced client
representation (Eq. 4), the group-customization loss l_GC (Eq. 7) and the representation-alignment loss l_RA
(Eq. 8). Pure functions of tensors.

``similarity`` "dot" is the paper's h . H / tau; "cosine" is the authors' code (cosine similarities; l_RA
then has no temperature).

Every term is computed in float32, also under bf16 autocast (:func:`~raysim.ops.float32.in_float32`): h_tilde sums
a client's rows, and the losses divide differences of dot products by tau; in bf16's 8 bits both lose what the terms
measure (FedGC and FedGCR lost 3-5 points to it, bench/precision.py --accuracy).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from raysim.ops.float32 import in_float32


@in_float32
def class_balanced_mean(h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 4: h_tilde = (1/C) sum_c mean_{x in D_c} h_x over the C classes present (hides the label mix)."""
    classes, index = torch.unique(labels, return_inverse=True)
    sums = torch.zeros(len(classes), h.shape[1], dtype=h.dtype).index_add_(0, index, h)
    counts = torch.bincount(index, minlength=len(classes)).to(h.dtype)
    return (sums / counts[:, None]).mean(dim=0)


def similarity(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    """``[B, K]`` dot products (paper) or cosine similarities (authors' code) of the rows of a ``[B, D]`` and
    b ``[K, D]``."""
    if kind == "cosine":
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    return a @ b.T


@in_float32
def gc_loss(
    h: torch.Tensor, centres: torch.Tensor, cluster: int, h_prev: torch.Tensor | None, tau: float, kind: str = "dot"
) -> torch.Tensor:
    """Eq. 7, mean over the batch: -log exp(h.H_i/tau) / (exp(h.h_prev/tau) + sum_t exp(h.H_t/tau)).

    Without ``h_prev`` (the client's first participation) the h_prev term is left out of the denominator.
    """
    anchors = centres if h_prev is None else torch.cat([centres, h_prev[None]], dim=0)
    logits = similarity(h, anchors, kind) / tau
    return (torch.logsumexp(logits, dim=1) - logits[:, cluster]).mean()


@in_float32
def ra_loss(z: torch.Tensor, z0: torch.Tensor, z_prev: torch.Tensor, tau: float, kind: str = "dot") -> torch.Tensor:
    """Eq. 8, mean over rows: -log exp(z.z0/tau) / (exp(z.z0/tau) + exp(z.z_prev/tau)) = softplus((s_prev - s0)/tau)."""
    if kind == "cosine":
        z, z0, z_prev = (F.normalize(v, dim=-1) for v in (z, z0, z_prev))
    return F.softplus(((z * z_prev).sum(dim=1) - (z * z0).sum(dim=1)) / tau).mean()
