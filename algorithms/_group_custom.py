"""FedGCR's group customisation, beside its methods (``fedgcr``, ``fedgc``, ``fedgr``): GC-Net, the frozen class
token it reads, and the server's anonymous clustering of the clients with a Gaussian mixture (scikit-learn).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch.nn import functional as F

GC_NET = ("gc_w1", "gc_b1", "gc_w2", "gc_b2")


def gc_net_parameters(dim: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """GC-Net d -> 4d -> d, initialised as ``nn.Linear`` does (uniform +-1/sqrt(fan_in)), from ``generator``."""
    shapes = {
        "gc_w1": ((4 * dim, dim), dim),
        "gc_b1": ((4 * dim,), dim),
        "gc_w2": ((dim, 4 * dim), 4 * dim),
        "gc_b2": ((dim,), 4 * dim),
    }
    return {
        name: torch.empty(shape).uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in), generator=generator)
        for name, (shape, fan_in) in shapes.items()
    }


def gc_net(weights, cls: torch.Tensor) -> torch.Tensor:
    """h = W2 ReLU(W1 cls + b1) + b2: the type-specific prompt from the frozen backbone's class token."""
    hidden = F.relu(F.linear(cls, weights["gc_w1"], weights["gc_b1"]))
    return F.linear(hidden, weights["gc_w2"], weights["gc_b2"])


def class_token(vit, x: torch.Tensor) -> torch.Tensor:
    """The prompt-free backbone's class token after the final norm, differentiable in ``x``."""
    return vit.norm(vit.blocks(vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))))[:, 0]


@torch.no_grad()
def frozen_cls(vit, x: torch.Tensor) -> torch.Tensor:
    """The frozen, prompt-free backbone's class token after the final norm (GC-Net's input, FedGC pass 1)."""
    return class_token(vit, x)


def cluster_clients(reps: np.ndarray, clusters: int, seed: int, covariance: str = "full"):
    """Fit a Gaussian mixture (scikit-learn) with ``clusters`` components to the clients' h_tilde.

    Returns:
        (labels, centres, mixture): hard assignments ``[n]``, the centres H ``[clusters, D]`` as the mean h_tilde
        of each cluster (FedGCR: "the mean of h_tilde over each cluster"; a component that took no client keeps
        its Gaussian mean), and the fitted mixture (to assign clients that did not take part).
    """
    # scikit-learn (and SciPy under it: ~120 MB a process) is imported by the server that clusters, not by every
    # process that looks a method up
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    reps = np.asarray(reps, dtype=np.float64)
    mixture = GaussianMixture(n_components=clusters, covariance_type=covariance, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = mixture.fit_predict(reps)
    centres = mixture.means_.copy()
    for c in np.unique(labels):
        centres[c] = reps[labels == c].mean(axis=0)
    return labels, centres, mixture


def cluster_accuracy(clusters: np.ndarray, types: np.ndarray) -> float:
    """Share (%) of clients whose cluster's majority type is their own type (FedGCR Table 3)."""
    clusters, types = np.asarray(clusters), np.asarray(types)
    hits = 0
    for c in np.unique(clusters):
        member = types[clusters == c]
        hits += np.bincount(member).max()
    return 100.0 * hits / len(types)
