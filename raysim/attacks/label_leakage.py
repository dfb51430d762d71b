"""Labels from the gradients a split-learning client's tail returns to its server (FedV, FedVZ, FESTA).

At every local step the client's tail sends back g = dL/dz, the loss's gradient in the encoder's output z, for the
server to backpropagate through its blocks. With cross-entropy averaged over a batch of B rows, row b's share is

    g_b = J_b^T (p_b - onehot(y_b)) / B,

J_b the Jacobian of the tail's logits in z_b and p_b their softmax. A server that holds the tail (after an average,
every client starts its round from the tails the server averaged) and z (it computed it) solves r_b = argmin_r
||J_b^T r - g_b|| by least squares and reads the label off r_b as iDLG reads it off the last layer's gradient (Zhao,
Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020): p_b - onehot(y_b) is negative in the true class
only. Label leakage from the returned gradients is split learning's known weakness (Li et al., "Label Leakage and
Protection in Two-party Split Learning", ICLR 2022, who read binary labels off the gradients' norms and directions
without the tail); FedV's and FedVZ's clients return their gradients alike, whichever way the server then steps.

The solve needs J_b of rank C: a class-token head reads D numbers, so it needs D >= C (192 against 62 classes on the
offline default); where it does not hold the attack refuses rather than guess. The residual is about 0 when the
assumed tail is the one the client stepped with (its first step after an average) and grows as the client's tail
moves away from it over its local steps, while the negative entry usually stays where it was.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from raysim.base.errors import ConfigError


def logit_gradients(
    tail: Callable[[torch.Tensor], torch.Tensor], outputs: torch.Tensor, returned: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(r ``[B, C]``, each row's relative residual ``||J_b^T r_b - g_b|| / ||g_b||``): the gradients in the logits of
    ``tail`` (``[B, T, D]`` encoder outputs to ``[B, C]`` logits, rows independent) that best explain the
    ``returned`` gradients ``g`` ``[B, T, D]`` at ``outputs`` z, by least squares per row over the tokens the logits
    depend on (the class token alone for a class-token head). Raises :class:`ConfigError` where the Jacobian's rank
    is below C (more classes than the tail's input has directions): r is then not determined by g."""
    z = outputs.detach().double().requires_grad_(True)
    logits = tail(z)
    classes = logits.shape[1]
    mix = torch.randn(classes, generator=torch.Generator().manual_seed(0), dtype=logits.dtype)
    (probe,) = torch.autograd.grad(logits @ mix, z, torch.ones(len(z), dtype=z.dtype), retain_graph=True)
    read = probe.abs().amax(dim=(0, 2)) > 0  # [T]: the tokens the logits depend on (through a generic mix of them)
    columns = [
        torch.autograd.grad(logits[:, c].sum(), z, retain_graph=c + 1 < classes)[0][:, read] for c in range(classes)
    ]
    jacobians = torch.stack(columns, dim=-1).flatten(1, -2)  # [B, T' D, C]: J_b^T
    rank = int(torch.linalg.matrix_rank(jacobians).min())  # every row's solve needs rank C
    if rank < classes:
        raise ConfigError(
            f"the tail's {classes} logits depend on its input through a Jacobian of rank {rank}: the returned "
            "gradient does not determine each row's logit gradient, and label leakage by least squares does not apply"
        )
    g = returned.detach().double()[:, read].flatten(1).unsqueeze(-1)
    r = torch.linalg.lstsq(jacobians, g).solution
    residual = (jacobians @ r - g).norm(dim=(1, 2)) / g.norm(dim=(1, 2)).clamp_min(torch.finfo(g.dtype).tiny)
    return r.squeeze(-1), residual


def leaked_labels(r: torch.Tensor) -> torch.Tensor:
    """Each row's label: the class whose logit gradient is lowest (the one negative entry of p - onehot(y))."""
    return r.argmin(dim=1)
