"""Loss-driven aggregation weights for fairness (pure tensor math, shared by FedGR, q-FFL, AFL and TERM).

Each function turns the round's per-client losses into aggregation weights or a new global model; the
methods in ``algorithms/`` only gather the losses and call these. References: q-FFL (Li et al., ICLR 2020),
AFL (Mohri et al., ICML 2019), TERM (Li et al., ICLR 2021), FedGR (FedGCR, AAAI 2024, Eq. 3-5).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Tensors = dict[str, torch.Tensor]
LOSS_FLOOR = 1e-10  # added to losses before powers, as the authors of q-FFL and FedGCR do (0^p would zero a client)


def fedgr_beta(round: int, delta: float, gamma: float) -> float:
    """FedGCR Eq. 5: beta = delta * (1 - gamma^(r-1)), r from 1 (so beta = 0 in round 1)."""
    return delta * (1.0 - gamma ** (round - 1))


def fedgr_weights(
    losses: Sequence[float],
    sizes: Sequence[int],
    clusters: Sequence[int],
    beta: float,
    q: float,
    variant: str = "paper",
    round: int = 1,
) -> torch.Tensor:
    """FedGR aggregation weights (FedGCR Eq. 3 / Algorithm 1 line 9), normalised to sum to 1.

    paper: L'_ij = L_ij^(1-beta) * Lbar_i^beta, Lbar_i the plain mean loss of cluster i; w_ij ~ omega_ij * L'_ij^(q+1)
    with omega the data share. code (the authors' implementation): losses quantised as 100 / int(100 / L), the
    individual power is a = beta + (1 - beta) * 0.9^(t+1) with t = r - 1 the 0-based round (the authors pass a
    constant beta, their "base" 0.5: the 0.9^(t+1) term is the warm-up), the cluster power 1 - a, and Lbar_i is
    the data-weighted mean.
    """
    loss = torch.as_tensor(list(losses), dtype=torch.float64)
    size = torch.as_tensor(list(sizes), dtype=torch.float64)
    cluster = torch.as_tensor(list(clusters), dtype=torch.long)
    if variant == "code":
        loss = 100.0 / torch.floor(100.0 / loss).clamp(min=1.0)
        power = beta + (1.0 - beta) * 0.9**round
    else:
        power = 1.0 - beta
    loss = loss + LOSS_FLOOR
    mean = torch.zeros_like(loss)
    for c in cluster.unique():
        member = cluster == c
        weight = size[member] if variant == "code" else torch.ones(int(member.sum()), dtype=torch.float64)
        mean[member] = (loss[member] * weight).sum() / weight.sum()
    adjusted = loss**power * mean ** (1.0 - power)
    weights = size / size.sum() * adjusted ** (q + 1.0)
    return weights / weights.sum()


def tilted_weights(losses: Sequence[float], sizes: Sequence[int], tilt: float) -> torch.Tensor:
    """TERM's client-level tilt (Li et al., 2021): w_k ~ omega_k * exp(t * F_k), normalised (a softmax, stable)."""
    loss = torch.as_tensor(list(losses), dtype=torch.float64)
    size = torch.as_tensor(list(sizes), dtype=torch.float64)
    return torch.softmax(tilt * loss + torch.log(size / size.sum()), dim=0)


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection onto the probability simplex (Duchi et al., 2008), used by AFL's lambda ascent."""
    u, _ = torch.sort(v, descending=True)
    cumulative = torch.cumsum(u, dim=0) - 1.0
    index = torch.arange(1, len(v) + 1, dtype=v.dtype)
    rho = int(torch.nonzero(u - cumulative / index > 0).max())
    return torch.clamp(v - cumulative[rho] / (rho + 1), min=0.0)


def afl_lambda_step(
    lambdas: torch.Tensor, clients: Sequence[int], losses: Sequence[float], lr: float, scale: float = 1.0
) -> torch.Tensor:
    """AFL's mixture update (Mohri et al., 2019): lambda <- Proj_simplex(lambda + lr * g), g the sampled clients'
    losses times ``scale`` (M / m makes g an unbiased estimate of the full loss vector under uniform sampling)
    and 0 for the clients not sampled this round."""
    gradient = torch.zeros_like(lambdas)
    gradient[list(clients)] = scale * torch.as_tensor(list(losses), dtype=lambdas.dtype)
    return project_simplex(lambdas + lr * gradient)


def afl_one_step_weights(losses: Sequence[float], sizes: Sequence[int], lr: float) -> torch.Tensor:
    """AFL as FedGCR's code runs it (their utils/util.py:1092-1096): Proj_simplex(omega + lr * F), one projected
    ascent step from the data shares omega every round, without AFL's running lambda."""
    size = torch.as_tensor(list(sizes), dtype=torch.float64)
    return project_simplex(size / size.sum() + lr * torch.as_tensor(list(losses), dtype=torch.float64))


def qffl_step(
    global_params: Tensors,
    updates: Sequence[Tensors],
    losses: Sequence[float],
    sizes: Sequence[int],
    q: float,
    lipschitz: float,
) -> Tensors:
    """q-FedAvg's server step (Li et al., ICLR 2020, Algorithm 2), each client weighted by its data share p_k.

    Delta w_k = L (w - w_k); Delta_k = F_k^q Delta w_k; h_k = q F_k^(q-1) ||Delta w_k||^2 + L F_k^q;
    w <- w - sum_k p_k Delta_k / sum_k p_k h_k, with F_k the loss of the global model w on client k's data. The
    paper samples clients with probability p_k and weighs them equally; raysim samples uniformly (the shared
    protocol), so p_k moves into the sums. q = 0 is FedAvg.
    """
    names = list(global_params)
    loss = torch.as_tensor(list(losses), dtype=torch.float64) + LOSS_FLOOR
    share = torch.as_tensor(list(sizes), dtype=torch.float64)
    share = share / share.sum()
    deltas = [{n: lipschitz * (global_params[n].double() - u[n].double()) for n in names} for u in updates]
    squared = torch.stack([sum((d[n] ** 2).sum() for n in names) for d in deltas])
    h = q * loss ** (q - 1.0) * squared + lipschitz * loss**q
    out = {}
    for n in names:
        step = sum(p * f**q * d[n] for p, f, d in zip(share, loss, deltas)) / (share * h).sum()
        out[n] = (global_params[n].double() - step).to(global_params[n].dtype)
    return out
