"""Server-side generators of personal parameters, trained from the clients' parameter deltas: pFedHN's hypernetwork
(Shamsian, Navon, Fetaya, Chechik, ICML 2021) and pFedPG's prompt generator (Yang, Wang, Wang, ICCV 2023), plus the
server optimisers they step with. Pure functions of named tensors (the server state stores them).

Both treat a client's delta dtheta_i = theta_i - theta~_i (what it was sent minus what it trained) as the gradient
of its loss at theta_i and backpropagate it through the generator: grad_phi = (d theta_i / d phi)^T dtheta_i.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.nn import functional as F

Tensors = dict[str, torch.Tensor]
Generate = Callable[[Tensors, torch.Tensor], Tensors]  # (generator weights, one client's embedding) -> its tensors


def uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> torch.Tensor:
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def mlp_hypernet(
    embed_dim: int, hidden: int, layers: int, targets: dict[str, tuple[int, ...]], generator: torch.Generator
) -> Tensors:
    """pFedHN's hypernetwork (``experiments/pfedhn/models.py``): Linear(e, h), then ``layers`` x [ReLU, Linear(h, h)],
    then one Linear(h, numel) per target tensor; torch's Linear initialisation U(+-1/sqrt(fan_in))."""
    dims = [embed_dim] + [hidden] * (layers + 1)
    out: Tensors = {}
    for i, (fan_in, fan_out) in enumerate(zip(dims, dims[1:])):
        out[f"body.{i}.weight"] = uniform((fan_out, fan_in), 1 / math.sqrt(fan_in), generator)
        out[f"body.{i}.bias"] = uniform((fan_out,), 1 / math.sqrt(fan_in), generator)
    for name, shape in targets.items():
        out[f"out.{name}.weight"] = uniform((math.prod(shape), hidden), 1 / math.sqrt(hidden), generator)
        out[f"out.{name}.bias"] = uniform((math.prod(shape),), 1 / math.sqrt(hidden), generator)
    return out


def mlp_generate(weights: Tensors, embedding: torch.Tensor, targets: dict[str, tuple[int, ...]]) -> Tensors:
    """theta = h(v; phi): the body (no ReLU after its last layer, as the authors' code), then each target's head."""
    depth = sum(1 for k in weights if k.startswith("body.") and k.endswith(".weight"))
    h = embedding
    for i in range(depth):
        h = F.linear(torch.relu(h) if i else h, weights[f"body.{i}.weight"], weights[f"body.{i}.bias"])
    return {
        name: F.linear(h, weights[f"out.{name}.weight"], weights[f"out.{name}.bias"]).view(shape)
        for name, shape in targets.items()
    }


def attention_prompt(weights: Tensors, descriptor: torch.Tensor, heads: int) -> torch.Tensor:
    """pFedPG's client-specific prompt: P_n = P_base + MHA(q = d_n W_q, K = P_base W_k, V = P_base W_v) W_o, one
    descriptor token attending over the ``[L, D]`` basis, its output added to every basis token."""
    base = weights["base"]
    length, dim = base.shape
    q = (descriptor @ weights["w_q"]).view(heads, dim // heads)
    k = (base @ weights["w_k"]).view(length, heads, dim // heads)
    v = (base @ weights["w_v"]).view(length, heads, dim // heads)
    attn = torch.softmax(torch.einsum("hd,lhd->hl", q, k) / math.sqrt(dim // heads), dim=1)
    return base + (torch.einsum("hl,lhd->hd", attn, v).reshape(dim) @ weights["w_o"])[None]


def delta_gradients(
    generate: Generate, weights: Tensors, embeddings: torch.Tensor, deltas: dict[int, Tensors]
) -> tuple[Tensors, torch.Tensor]:
    """(grad of the shared weights, grad of the embedding table) of sum_i <theta_i, dtheta_i>, theta_i =
    generate(weights, embeddings[i]): the shared weights' is averaged over the clients, each embedding row gets its
    own client's (pFedHN Alg. 1: phi -= a (d theta_i / d phi)^T dtheta_i, v_i -= a (d theta_i / d v_i)^T dtheta_i)."""
    leaves = {k: w.detach().requires_grad_(True) for k, w in weights.items()}
    table = embeddings.detach().requires_grad_(True)
    total = sum(
        (theta * deltas[c][name].to(theta)).sum()
        for c in sorted(deltas)
        for name, theta in generate(leaves, table[c]).items()
    )
    *shared, rows = torch.autograd.grad(total, [*leaves.values(), table], allow_unused=True)
    grads = {k: torch.zeros_like(w) if g is None else g / len(deltas) for (k, w), g in zip(leaves.items(), shared)}
    return grads, rows


def clip_by_norm(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``torch.nn.utils.clip_grad_norm_``: scale all by min(1, max_norm / (||g||_2 + 1e-6)), the norm over all."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [g * scale for g in grads]


def sgd_momentum(
    param: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor, lr: float, momentum: float, weight_decay: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.optim.SGD``'s step (buffer zero before the first): d = g + wd p; b = mu b + d; p - lr b."""
    buf = momentum * buf + grad + weight_decay * param
    return param - lr * buf, buf


def adam(
    param: torch.Tensor,
    grad: torch.Tensor,
    moments: tuple[torch.Tensor, torch.Tensor],
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``torch.optim.Adam``'s ``step``-th update (1-based) with bias correction; returns (param, (m, v))."""
    m = betas[0] * moments[0] + (1 - betas[0]) * grad
    v = betas[1] * moments[1] + (1 - betas[1]) * grad * grad
    m_hat, v_hat = m / (1 - betas[0] ** step), v / (1 - betas[1] ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), (m, v)
