"""Group-prompt selection shared by SGPT (CVPR 2024) and FGPT/FGPT-U (Deng et al.): pure tensor functions.

Keys are compared with a sample's query by cosine similarity; training selects with SGPT's q_g-calibrated rule
and adds L_key; the server weighs each group's tensors by the per-group selection counts N_g^i and applies
momentum (Eq. 7). The clustering scores follow SGPT Table 4 and Appendix D.2.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from raysim.base.errors import ConfigError
from raysim.ops.float32 import in_float32


def orthogonal_keys(groups: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """``[G, D]`` orthonormal rows: Xavier-uniform draws, then Gram-Schmidt (QR with a positive diagonal)."""
    if groups > dim:
        raise ConfigError(f"{groups} orthogonal keys need groups <= the backbone width {dim}; lower the groups")
    bound = math.sqrt(6.0 / (groups + dim))
    draws = torch.empty(groups, dim).uniform_(-bound, bound, generator=generator)
    q, r = torch.linalg.qr(draws.T.double())
    return (q * torch.sign(torch.diagonal(r))).T.float().contiguous()


def random_keys(groups: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """``[G, D]`` unit-norm Gaussian rows (FGPT's non-orthogonal key ablation)."""
    return torch.nn.functional.normalize(torch.randn(groups, dim, generator=generator), dim=1)


@in_float32
def cosine(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``[B, G]`` cosine similarities between queries ``[B, D]`` and keys ``[G, D]``, in float32 even under bf16
    autocast: a selection is an argmax over them, and bf16's 8 bits flip near-ties (a few rows of a client's epoch)."""
    return torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(keys, dim=1).T


def shares(totals: torch.Tensor) -> torch.Tensor:
    """q_g = v_g / sum_g v_g, the cumulative selection shares; uniform before any selection."""
    total = totals.sum()
    return totals / total if total > 0 else torch.full_like(totals, 1.0 / len(totals))


def select_calibrated(cos: torch.Tensor, q: torch.Tensor, eps: float) -> torch.Tensor:
    """SGPT's training-time rule: argmin_g (1 - cos) * (q_g + eps), the paper's argmax_g (cos - 1) * q_g (Eq. 6) with
    q_g + eps in place of q_g, as the authors' code (eps = 0 is the paper's)."""
    return torch.argmin((1.0 - cos) * (q.to(cos) + eps), dim=1)


def key_loss(cos: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """L_key = -cos(q(x), k_g) for each sample's selected g, averaged over the batch."""
    return -cos.gather(1, selected[:, None]).mean()


def pool_select(queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DualPrompt's prompt-pool query (Wang et al., ECCV 2022): each query picks the key of highest cosine, and the
    matching loss mean_b (1 - cos(q_b, k_s(b))) pulls the picked keys towards their queries."""
    cos = cosine(queries, keys)
    picked = cos.argmax(dim=1)
    return picked, 1.0 + key_loss(cos, picked)


def counts(selected: torch.Tensor, groups: int) -> torch.Tensor:
    """How many samples chose each group (N_g^i over the selections given)."""
    return torch.bincount(selected.flatten().cpu(), minlength=groups).to(torch.float64)


def modal(selected: torch.Tensor, groups: int) -> torch.Tensor:
    """Every sample's group replaced by the batch's most frequent one, ties to the lowest index: the SGPT authors'
    code for Office/DomainNet (ubc-tea/SGPT ``models/vit_models_pr.py:441-445``, ``np.argmax(np.bincount(...))``).
    Works under ``torch.func.vmap`` (cohort training: one batch per client)."""
    hits = (selected[:, None] == torch.arange(groups, device=selected.device)).sum(dim=0)
    return hits.argmax().expand_as(selected)


def group_weighted_mean(values: torch.Tensor, group_counts: torch.Tensor, fallback_at_most: float = 0) -> torch.Tensor:
    """Per group g: sum_i N_g^i v_ig / sum_i N_g^i over clients i (SGPT Alg. 2 l. 13; FGPT's beta_g^i); the plain
    mean (1/m) where sum_i N_g^i <= ``fallback_at_most``: 0, only where no client chose g; the SGPT authors' code
    uses 50 (ubc-tea/SGPT ``utils.py:224``, ``if group_total[key] <= 50``).

    Args:
        values: ``[m, G, ...]`` each client's tensor per group.
        group_counts: ``[m, G]`` N_g^i.
        fallback_at_most: the largest total sum_i N_g^i that still falls back to the plain mean (>= 0).
    """
    weights = group_counts.to(torch.float64)
    total = weights.sum(dim=0, keepdim=True)
    weights = torch.where(
        total > fallback_at_most, weights / total.clamp_min(1e-300), torch.full_like(weights, 1.0 / len(weights))
    )
    shape = weights.shape + (1,) * (values.dim() - 2)
    return (weights.reshape(shape) * values.to(torch.float64)).sum(dim=0).to(values.dtype)


def momentum(previous: torch.Tensor, new: torch.Tensor, alpha: float) -> torch.Tensor:
    """SGPT Eq. 7: alpha * previous + (1 - alpha) * new."""
    return alpha * previous + (1.0 - alpha) * new


def normalised_entropy(p: torch.Tensor) -> float:
    """H(p) / log G in [0, 1]: 1 when every group is used equally, 0 when one group takes everything."""
    if p.numel() < 2:
        return 0.0
    used = p[p > 0].to(torch.float64)
    return float(-(used * used.log()).sum() / math.log(p.numel()))


def purity(assigned: np.ndarray, truth: np.ndarray) -> float:
    """Sum over assigned clusters of their largest truth count, over all rows (SGPT's clustering accuracy)."""
    if len(assigned) == 0:
        return float("nan")
    _, a = np.unique(assigned, return_inverse=True)
    _, t = np.unique(truth, return_inverse=True)
    table = np.zeros((a.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(table, (a, t), 1)
    return float(table.max(axis=1).sum() / len(assigned))


def instability(eval_counts: np.ndarray) -> float:
    """SGPT Fig. 3's selection stability as one number: ``eval_counts`` [evaluations, clients, groups] holds each
    client's test rows per group at each evaluation; over the second half of the evaluations, the standard
    deviation of each client's share of rows per group, averaged over groups and the clients with test rows (0:
    every client's rows stay with the same groups; a client without rows selects nothing, stably or not). NaN where
    the second half holds fewer than 2 evaluations (fewer than 3 in all) or no client has rows."""
    counts = np.asarray(eval_counts, dtype=np.float64)
    counts = counts[len(counts) // 2 :]
    rows = counts.sum(axis=2)  # [evaluations, clients]
    present = (rows > 0).all(axis=0)
    if len(counts) < 2 or not present.any():
        return float("nan")
    shares = counts[:, present] / rows[:, present, None]
    return float(shares.std(axis=0).mean())


def congruence(groups: np.ndarray, kmeans: np.ndarray, classes: np.ndarray) -> float:
    """SGPT App. D.2: Acc_overlap / Q_kmeans, with Acc_overlap the purity of the learned groups against the
    centralised K-Means clusters and Q_kmeans the share of each class's rows in its most common cluster."""
    return purity(groups, kmeans) / purity(classes, kmeans)
