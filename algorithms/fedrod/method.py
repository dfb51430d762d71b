"""Fed-RoD (Chen and Chao, "On Bridging Generic and Personalized Federated Learning for Image Classification",
ICLR 2022), a FedV baseline, with the linear personal head.

The body and the generic head g train as in FedAvg (full fine-tuning, averaged with N_i / N) on the balanced
risk: the balanced softmax cross-entropy CE(g(f(x)) + log p_i(y), y), p_i the client's label frequencies. The
personal head p (client state, zero at first) trains on the empirical risk of the sum, CE(g(f(x)) + p(f(x)), y),
with no gradient into f or g. A client predicts with g + p; both being linear on f, that is one head with
weights W_g + W_p, which is how it is evaluated.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from raysim.algorithms.fedavg.method import FedAvg
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import Personalised, implements

HEAD = ("vit.head.weight", "vit.head.bias")
PERSONAL = ("rod.weight", "rod.bias")


def balanced_softmax_loss(logits: torch.Tensor, labels: torch.Tensor, class_counts: torch.Tensor) -> torch.Tensor:
    """CE(logits + log(n_y / n), y) (Ren et al., 2020); classes the client lacks get log(1e-8)."""
    prior = (class_counts / class_counts.sum()).clamp_min(1e-8).log()
    return F.cross_entropy(logits + prior.to(logits), labels)


@implements("fedrod")
class FedRoD(Personalised, FedAvg):
    record_dp = "its balanced-softmax loss reads the client's label histogram, so one row's gradient depends on all"

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, view = ctx.model, broadcast.params
        model.load_trainable(view)
        weight, bias = (
            (torch.zeros_like(view[h]) for h in HEAD)
            if client_state is None
            else (client_state[p].clone() for p in PERSONAL)
        )
        personal = (weight.to(ctx.device).requires_grad_(True), bias.to(ctx.device).requires_grad_(True))
        counts = torch.from_numpy(np.bincount(data.labels, minlength=view[HEAD[1]].shape[0])).double()

        def objective(x, y, rows):
            features = model.vit.forward_head(model.forward_features(x)[0], pre_logits=True)
            generic = model.vit.head(features)
            mine = F.linear(features.detach(), *personal)
            return balanced_softmax_loss(generic, y, counts) + F.cross_entropy(generic.detach() + mine, y)

        metrics = training.local_train(ctx, data, objective, extra=personal)
        state = {name: t.detach().cpu().clone() for name, t in zip(PERSONAL, personal)}
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics, state=state)

    def eval_params(self, view, client_state):
        """The generic model with the head g + p."""
        if client_state is None:
            return view
        return {**view, **{h: view[h] + client_state[p] for h, p in zip(HEAD, PERSONAL)}}
