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
without the tail); FedV's and FedVZ's clients return the same gradients, whichever way the server then steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def logit_gradients(
    tail: Callable[[torch.Tensor], torch.Tensor], outputs: torch.Tensor, returned: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(r ``[B, C]``, each row's relative residual ``||J_b^T r_b - g_b|| / ||g_b||``): the gradients in the logits of
    ``tail`` (``[B, T, D]`` encoder outputs to ``[B, C]`` logits, rows independent) that best explain the
    ``returned`` gradients ``g`` ``[B, T, D]`` at ``outputs`` z, by least squares per row."""
    z = outputs.detach().double().requires_grad_(True)
    logits = tail(z)
    columns = [
        torch.autograd.grad(logits[:, c].sum(), z, retain_graph=c + 1 < logits.shape[1])[0]
        for c in range(logits.shape[1])
    ]
    jacobians = torch.stack(columns, dim=-1).flatten(1, -2)  # [B, T D, C]: J_b^T
    g = returned.detach().double().flatten(1).unsqueeze(-1)
    r = torch.linalg.lstsq(jacobians, g).solution
    residual = (jacobians @ r - g).norm(dim=(1, 2)) / g.norm(dim=(1, 2)).clamp_min(torch.finfo(g.dtype).tiny)
    return r.squeeze(-1), residual


def leaked_labels(r: torch.Tensor) -> torch.Tensor:
    """Each row's label: the class whose logit gradient is lowest (the one negative entry of p - onehot(y))."""
    return r.argmin(dim=1)
