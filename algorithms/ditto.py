"""Ditto (Li, Hu, Beirami, Smith, "Ditto: Fair and Robust Federated Learning through Personalization", ICML 2021),
a FedV baseline: each client trains the global model as in FedAvg (full fine-tuning) and, from its own
personal model v, minimises F_k(v) + (lambda / 2) ||v - w_global||^2 for as many local epochs; v stays on the
client and is what it is evaluated with. The FedV paper reports lambda = 0.75 best of {0.1, 0.4, 0.75, 1}."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch.nn.functional as F

from raysim import train
from raysim.algorithms.fedavg import FedAvg
from raysim.algorithms.fedprox import proximal_term
from raysim.errors import ConfigError
from raysim.method import ClientResult
from raysim.registry import register
from raysim.seeding import derive_seed


@dataclass(frozen=True)
class DittoOptions:
    lam: float = 0.75

    def __post_init__(self):
        if self.lam < 0:
            raise ConfigError(f"ditto.lam={self.lam} must be >= 0 (0 trains the personal models alone)")


@register("ditto", "Ditto: FedAvg global model + personal models pulled to it by (lambda/2)||v - w||^2 (Li et al. 2021)")
class Ditto(FedAvg):
    Options = DittoOptions

    def client_update(self, ctx, view, client_state, data) -> ClientResult:
        """The global model's local update (sent), then the personal model's (kept as the client's state)."""
        result = super().client_update(ctx, view, None, data)
        model = ctx.model
        model.load_trainable(view if client_state is None else client_state)
        personal_ctx = replace(ctx, seed=derive_seed(ctx.seed, "block", 1))  # its own batch order

        def objective(x, y, rows):
            trained = {n: p for n, p in model.named_parameters() if n in view}
            return F.cross_entropy(model(x), y) + 0.5 * self.options.lam * proximal_term(trained, view)

        personal = train.local_train(personal_ctx, data, objective)
        result.stats["personal_loss"] = personal["train_loss"]
        result.state = model.trainable_state()
        return result

    def eval_view(self, view, client_state):
        return view if client_state is None else client_state
