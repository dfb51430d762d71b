"""AFL (Mohri, Sivek, Suresh, "Agnostic Federated Learning", ICML 2019) on prompts + head: min over the model,
max over a mixture lambda of the clients. The server averages the sampled clients' models with weights lambda_k
and then ascends lambda <- Proj_simplex(lambda + lambda_lr * (M / m) F), F the sampled clients' losses of the
received model (M / m keeps the step unbiased under partial participation). lambda (one entry per client,
uniform at first; held-out unseen clients keep theirs but never pull it up) is the server state. A FedGCR
baseline (Table 1)."""

from dataclasses import dataclass

import torch

from raysim.algorithms._fairness import ReportsGlobalLoss, client_losses, with_data
from raysim.algorithms.fedvpt import FedVPT, PromptOptions
from raysim.core.errors import ConfigError
from raysim.core.messages import GlobalState
from raysim.core.registry import register
from raysim.ops.aggregate import weighted_mean
from raysim.ops.reweighting import afl_lambda_step

LAMBDA = "afl_lambda"


@dataclass(frozen=True)
class AFLOptions(PromptOptions):
    lambda_lr: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        if self.lambda_lr < 0:
            raise ConfigError(f"afl.lambda_lr={self.lambda_lr} must be >= 0 (0 keeps the uniform mixture)")


@register(
    "afl",
    "Agnostic FL: minimax over a client mixture lambda, projected ascent on the losses (Mohri et al. 2019)",
    family="fairness",
    options=AFLOptions,
)
class AFL(ReportsGlobalLoss, FedVPT):
    def init_global(self, model, generator):
        clients = self.config.federation.clients
        return GlobalState(
            params=model.trainable_state(), server={LAMBDA: torch.full((clients,), 1.0 / clients, dtype=torch.float64)}
        )

    def aggregate(self, round, state, updates):
        updates = with_data(updates)
        lambdas = state.server[LAMBDA]
        clients = [u.client_id for u in updates]
        weights = lambdas[clients]
        weights = weights if weights.sum() > 0 else torch.ones(len(clients), dtype=torch.float64)
        params = weighted_mean([u.params for u in updates], weights)
        scale = self.config.federation.trainable_clients / len(updates)  # M / m: unbiased under uniform sampling
        lambdas = afl_lambda_step(lambdas, clients, client_losses(updates), self.options.lambda_lr, scale)
        return GlobalState(params=params, server={**state.server, LAMBDA: lambdas})
