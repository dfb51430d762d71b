"""SPSA (simultaneous perturbation stochastic approximation) on a stack of blocks, for FedVZ's server update
("Heterogeneous Federated Learning with Splited Language Model", eq. 5): the estimate's scalar, the directions z
regenerated from a seed (never stored), the perturbed forward and the step. Pure torch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
from torch import nn


def spsa_coefficient(loss_plus: float, loss_minus: float, eps: float) -> float:
    """(L(w + eps z) - L(w - eps z)) / (2 eps): the scalar that times z is FedVZ's gradient estimate (eq. 5)."""
    return (loss_plus - loss_minus) / (2.0 * eps)


def directions(blocks: nn.Module, seed: int) -> Iterator[tuple[nn.Parameter, torch.Tensor]]:
    """Each encoder parameter with its slice of z ~ N(0, I), drawn from ``seed`` in parameter order: the same z
    every time it is regenerated, so z is never stored."""
    generator = None
    for param in blocks.parameters():
        if generator is None or generator.device != param.device:
            generator = torch.Generator(device=param.device).manual_seed(seed)
        yield param, torch.randn(param.shape, generator=generator, device=param.device, dtype=param.dtype)


def perturbed_forward(blocks: nn.ModuleList, x: torch.Tensor, seed: int, scale: float) -> torch.Tensor:
    """The encoder's output with weights w + scale * z, z from ``seed``, without writing the weights.

    Block by block, a scratch copy of the block takes the perturbed weights and runs: memory beyond the encoder
    is one block, and the encoder's weights stay bit-identical, so requests of other clients served meanwhile see
    the unperturbed encoder. (MeZO's in-place w += eps z, w -= 2 eps z, w += eps z would race with them and does
    not restore float32 weights exactly; ``torch.func.functional_call`` swaps the module's weights while it runs,
    the same race.)
    """
    stream = directions(blocks, seed)
    with torch.no_grad():
        for block in blocks:
            scratch = copy.deepcopy(block)
            for param in scratch.parameters():
                param.add_(next(stream)[1], alpha=scale)
            x = scratch(x)
    return x


def spsa_step(blocks: nn.Module, estimates: list[tuple[int, float]], lr: float) -> None:
    """w <- w - (lr / m) * sum_i c_i z_i over the m clients' (seed_i, c_i), z_i regenerated from seed_i."""
    if not estimates:
        return
    with torch.no_grad():
        for seed, coefficient in estimates:
            for param, z in directions(blocks, seed):
                param.sub_(z, alpha=lr * coefficient / len(estimates))
