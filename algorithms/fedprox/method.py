"""FedProx (Li et al., MLSys 2020) on prompts + head: the local loss adds (mu / 2) * ||w - w_global||^2
over the trained tensors, which keeps heterogeneous clients near the global model."""

import torch

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core.protocol import implements


def proximal_term(params: dict[str, torch.Tensor], anchor: dict[str, torch.Tensor]) -> torch.Tensor:
    """sum over tensors of ||w - w_anchor||^2."""
    return sum(((p - anchor[name].to(p.device)) ** 2).sum() for name, p in params.items())


@implements("fedprox")
class FedProx(FedVPT):
    def loss(self, model, logits, labels, broadcast):
        anchor = broadcast.params
        trained = {n: p for n, p in model.named_parameters() if n in anchor}
        ce = torch.nn.functional.cross_entropy(logits, labels)
        return ce + 0.5 * self.options.mu * proximal_term(trained, anchor)
