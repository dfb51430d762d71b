"""FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized Data", AISTATS
2017): the core hooks every other method starts from. Clients train the model's trainable tensors from the
global ones with the local objective (:meth:`FedAvg.loss`, cross-entropy) and the server takes their
sample-weighted mean, sum_i N_i w_i / N.

Registered as ``fedavg`` with full fine-tuning (every backbone weight and the head train and are communicated):
the heavy baseline prompt tuning is compared against in SGPT/FGPT. Subclasses change what trains (:meth:`parts`)
and, where their paper says so, the objective, the broadcast or the server step.
"""

from __future__ import annotations

import torch

from raysim.base.prompts import PromptSpec
from raysim.core import training
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.protocol import ClientContext, CohortPhase, CohortTraining, Method, ModelParts, implements
from raysim.ops.aggregate import row_masked_mean, weighted_mean


@implements("fedavg")
class FedAvg(CohortTraining, Method):
    def parts(self, vit, generator) -> ModelParts:
        return ModelParts(PromptSpec(train_backbone=True))

    def init_global(self, model, generator) -> GlobalState:
        """The worker model's trainable tensors (it is built from the run seed)."""
        return GlobalState(params=model.trainable_state())

    def configure(self, round, state, client_ids) -> Broadcast:
        return Broadcast(state.params)

    def client_update(self, ctx: ClientContext, broadcast: Broadcast, client_state, data) -> ClientUpdate:
        """E local epochs on the trainable tensors from the broadcast ones; sends the trained tensors."""
        model = ctx.model
        model.load_trainable(broadcast.params)
        metrics = training.local_train(ctx, data, lambda x, y, rows: self.loss(model, model(x), y, broadcast))
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics)

    def loss(self, model, logits: torch.Tensor, labels: torch.Tensor, broadcast: Broadcast) -> torch.Tensor:
        """The local objective (template hook); cross-entropy. ``model`` holds the client's current tensors."""
        return torch.nn.functional.cross_entropy(logits, labels)

    def cohort_phases(self, model, broadcast) -> list[CohortPhase]:
        """One pass over every trainable tensor with :meth:`loss` (for the methods registered ``cohort=True``)."""

        def objective(x, y, features):
            return self.loss(model, model(x), y, broadcast), x.new_zeros(())

        return [CohortPhase(tuple(model.trainable_names()), objective)]

    def aggregate(self, round, state, updates) -> GlobalState:
        """Sample-weighted mean (N_i / N) of the clients' tensors; with capacity tiers, of each row over the clients
        that trained it."""
        tensors, weights = [u.params for u in updates], [u.num_samples for u in updates]
        if any(u.trained for u in updates):
            params = row_masked_mean(tensors, weights, [u.trained for u in updates], state.params)
        else:
            params = weighted_mean(tensors, weights)
        return GlobalState(params=params, server=state.server)
