"""FedEM's mixture of K shared components (Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning
under a Mixture of Distributions", NeurIPS 2021, Alg. 1): the E-step responsibilities, the M-step mixture weights
and the mixture's prediction."""

from __future__ import annotations

import torch


def responsibilities(weights: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
    """E-step, ``[N, K]``: q(z_s = k) = pi_k exp(-l_k(s)) / sum_k' pi_k' exp(-l_k'(s)) for ``losses`` ``[K, N]``
    (the authors' ``softmax(log pi - losses)``)."""
    return torch.softmax(weights.double().log()[:, None] - losses.double(), dim=0).T


def mixture_weights(q: torch.Tensor) -> torch.Tensor:
    """M-step: pi_k = (1 / N) sum_s q(z_s = k)."""
    return q.mean(dim=0)


def mixture_log_probs(logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """log sum_k pi_k softmax(logits_k) for ``logits`` ``[K, B, C]``: the mixture's prediction, as log-probabilities."""
    log_pi = weights.to(logits).log()[:, None, None]
    return torch.logsumexp(log_pi + torch.log_softmax(logits, dim=2), dim=0)
