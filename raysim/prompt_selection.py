"""Group-prompt selection shared by SGPT (CVPR 2024) and FGPT/FGPT-U (Deng et al.): pure tensor functions.

A sample's query q(x) is the frozen backbone's class token, ReLU'd and L2-normalised (the authors' code);
it depends only on x and frozen weights, so it is computed once per row and run and cached with the shards.
Keys are compared with q by cosine similarity; the server aggregates keys and group prompts with the
per-group selection counts N_g^i. The clustering diagnostics follow SGPT Table 4 and Appendix D.2.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from raysim.aggregate import weighted_mean
from raysim.errors import ConfigError

EPS = 5e-4  # SGPT's eps in the q_g-calibrated selection


def paper_blocks(depth: int, first: int, count: int) -> tuple[int, ...]:
    """A block range given on the paper's 12-block ViT (0-based ``first``, ``count`` blocks) scaled to ``depth``.

    Start and length are each scaled by depth / 12 and rounded half up (at least one block): SGPT's shared
    blocks 0-2 and group blocks 3-5 of 12 become 0-1 and 2-3 on the 6-block default backbone.
    """
    scale = depth / 12
    start = min(depth - 1, math.floor(first * scale + 0.5))
    return tuple(range(start, min(depth, start + max(1, math.floor(count * scale + 0.5)))))


def check_blocks(name: str, blocks: tuple[int, ...], depth: int) -> tuple[int, ...]:
    """``blocks`` as a sorted tuple, or a one-line ConfigError when one is outside the backbone."""
    if not blocks or any(not isinstance(b, int) or not 0 <= b < depth for b in blocks) or len(set(blocks)) != len(blocks):
        raise ConfigError(f"{name}={list(blocks)} must be distinct block indices in [0, {depth - 1}] "
                          f"(the backbone has {depth} blocks)")
    return tuple(sorted(blocks))


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


def query_layer(option: str, layer: int, depth: int) -> int:
    """The block (1-based) whose class token is the query: ``layer``, or the last block for 0."""
    layer = layer or depth
    if layer > depth:
        raise ConfigError(f"{option}={layer} is past the backbone's {depth} blocks; use 1..{depth} (0 = the last)")
    return layer


@torch.no_grad()
def backbone_query(vit, x: torch.Tensor, layer: int) -> torch.Tensor:
    """q(x): the frozen, prompt-free backbone's class token after block ``layer`` (1-based; the last block
    includes the final norm), ReLU then L2-normalise."""
    tokens = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))
    for block in vit.blocks[:layer]:
        tokens = block(tokens)
    if layer == len(vit.blocks):
        tokens = vit.norm(tokens)
    return torch.nn.functional.normalize(torch.relu(tokens[:, 0]), dim=1)


def cosine(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``[B, G]`` cosine similarities between queries ``[B, D]`` and keys ``[G, D]``."""
    return torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(keys, dim=1).T


def cached_cosine(data, rows, keys: torch.Tensor) -> torch.Tensor:
    """Cosines between the cached queries of ``rows`` of a client's data and ``keys`` (on the keys' device)."""
    return cosine(torch.as_tensor(data.features["query"][rows]).to(keys.device), keys)


def shares(totals: torch.Tensor) -> torch.Tensor:
    """q_g = v_g / sum_g v_g, the cumulative selection shares; uniform before any selection."""
    total = totals.sum()
    return totals / total if total > 0 else torch.full_like(totals, 1.0 / len(totals))


def select_calibrated(cos: torch.Tensor, q: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """SGPT's training-time rule: argmax_g (cos - 1) * q_g, i.e. argmin_g (1 - cos) * (q_g + eps)."""
    return torch.argmin((1.0 - cos) * (q.to(cos) + eps), dim=1)


def key_loss(cos: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """L_key = -cos(q(x), k_g) for each sample's selected g, averaged over the batch."""
    return -cos.gather(1, selected[:, None]).mean()


def counts(selected: torch.Tensor, groups: int) -> torch.Tensor:
    """How many samples chose each group (N_g^i over the selections given)."""
    return torch.bincount(selected.flatten().cpu(), minlength=groups).to(torch.float64)


def group_weighted_mean(values: torch.Tensor, group_counts: torch.Tensor) -> torch.Tensor:
    """Per group g: sum_i N_g^i v_ig / sum_i N_g^i over clients i; the plain mean where no client chose g.

    Args:
        values: ``[m, G, ...]`` each client's tensor per group.
        group_counts: ``[m, G]`` N_g^i.
    """
    weights = group_counts.to(torch.float64)
    total = weights.sum(dim=0, keepdim=True)
    weights = torch.where(total > 0, weights / total.clamp_min(1e-300), torch.full_like(weights, 1.0 / len(weights)))
    shape = weights.shape + (1,) * (values.dim() - 2)
    return (weights.reshape(shape) * values.to(torch.float64)).sum(dim=0).to(values.dtype)


def aggregate_with_counts(results, by_counts: str, name: str = "selection_counts") -> tuple[dict, torch.Tensor]:
    """Server aggregation of SGPT/FGPT: every tensor weighted N_i / N except ``by_counts``, which is weighted
    per group by N_g^i / sum_i N_g^i; also returns the clients' N_g^i stacked ``[m, G]``."""
    updates = [{k: v for k, v in r.update.items() if k != name} for r in results]
    group_counts = torch.stack([r.update[name] for r in results])
    params = weighted_mean(updates, [r.num_samples for r in results])
    params[by_counts] = group_weighted_mean(torch.stack([u[by_counts] for u in updates]), group_counts)
    return params, group_counts


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


def congruence(groups: np.ndarray, kmeans: np.ndarray, classes: np.ndarray) -> float:
    """SGPT App. D.2: Acc_overlap / Q_kmeans, with Acc_overlap the purity of the learned groups against the
    centralised K-Means clusters and Q_kmeans the share of each class's rows in its most common cluster."""
    return purity(groups, kmeans) / purity(classes, kmeans)
