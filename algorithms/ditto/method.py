"""Ditto (Li, Hu, Beirami, Smith, "Ditto: Fair and Robust Federated Learning through Personalization", ICML 2021),
a FedV baseline: each client trains the global model as in FedAvg (full fine-tuning) and, from its own
personal model v, minimises F_k(v) + (lambda / 2) ||v - w_global||^2 for as many local epochs; v stays on the
client and is what it is evaluated with. The FedV paper reports lambda = 0.75 best of {0.1, 0.4, 0.75, 1}.
Where the paper starts every v_k at w^0, v starts from the global model a client receives when first sampled (the
same at round 1); a client not yet sampled has no v and is evaluated with the global model."""

from __future__ import annotations

from dataclasses import replace

import torch.nn.functional as F

from raysim.algorithms.fedavg.method import FedAvg
from raysim.algorithms.fedprox.method import proximal_term
from raysim.base.seeding import Purpose, derive_seed
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import Personalised, implements


@implements("ditto")
class Ditto(Personalised, FedAvg):
    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        """The global model's local update (sent), then the personal model's (kept as the client's state)."""
        update = super().client_update(ctx, broadcast, None, data)
        model, anchor = ctx.model, broadcast.params
        model.load_trainable(anchor if client_state is None else client_state)
        personal_ctx = replace(ctx, seed=derive_seed(ctx.seed, Purpose.BLOCK, 1))  # its own batch order

        def objective(x, y, rows):
            trained = {n: p for n, p in model.named_parameters() if n in anchor}
            return F.cross_entropy(model(x), y) + 0.5 * self.options.lam * proximal_term(trained, anchor)

        personal = training.local_train(personal_ctx, data, objective)
        update.metrics["personal_loss"] = personal["train_loss"]
        for key in ("samples", "compute_s"):  # the client's work, both passes: what the virtual clock charges
            update.metrics[key] += personal[key]
        update.state = model.trainable_state()
        return update

    def eval_params(self, params, client_state):
        return params if client_state is None else client_state
