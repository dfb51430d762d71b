"""AFL (Mohri, Sivek, Suresh, "Agnostic Federated Learning", ICML 2019) on prompts + head: min over the model,
max over a mixture lambda of the clients. F_k is the received model's loss on client k's train rows. A FedGCR
baseline (Table 1).

``lambda_step="ascent"`` (the paper's projected ascent on lambda, as fair_flearn flearn/trainers/afl.py:47-57 takes
it, in a FedAvg-style adaptation: E local epochs and a lambda-weighted average of the models where that file takes
one gradient step per round): the server averages the sampled clients' models with weights lambda_k, then ascends
lambda <- Proj_simplex(lambda + lambda_lr * (M / m) F) (M / m keeps the step unbiased under partial
participation); lambda (one entry per client, uniform at first; held-out unseen clients keep theirs but never pull
it up) is the server state. Where every sampled client's lambda_k is 0 the model stays (the paper's model step,
sum_k lambda_k grad F_k, is then 0). The paper gives no lambda_lr; the default, m / (2 M^2), moves a sampled
client's lambda_k by half its uniform share 1/M per unit of loss in a round, whatever M and m (a step of 0.1 at M =
100 and m = 10 moves it by about 2, 200 uniform shares: lambda lands on one cohort, and the next, holding none,
leaves the model where it was in about half the rounds). The model evaluated is the last iterate, not the running
mean of the iterates that Stochastic-AFL returns. ``"one-step"`` (FedGCR's code, utils/util.py:1092-1096): every
round lambda = Proj_simplex(omega + lambda_lr * F) from the data shares
omega, no memory, and this round's models are averaged with it (raysim: omega and F over the sampled clients); its
default lambda_lr, 1 / (2 m), likewise moves a client's weight by half its uniform share per unit of loss."""

from dataclasses import replace

import torch

from raysim.algorithms._fairness import ReportsGlobalLoss, client_losses, with_data
from raysim.algorithms.afl import AFLOptions
from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core.messages import GlobalState
from raysim.core.protocol import ResolvesOptions, implements
from raysim.ops.aggregate import weighted_mean
from raysim.ops.reweighting import afl_lambda_step, afl_one_step_weights

LAMBDA = "afl_lambda"


@implements("afl")
class AFL(ResolvesOptions, ReportsGlobalLoss, FedVPT):
    def resolved_options(self, depth: int) -> AFLOptions:
        """lambda_lr -1: the step the run takes."""
        return replace(self.options, lambda_lr=self.lambda_lr)

    @property
    def lambda_lr(self) -> float:
        """``lambda_lr``, or (-1) m / (2 M^2) for the ascent and 1 / (2 m) for one step (M trainable clients, m a
        round): a client's weight moves by half its uniform share per unit of loss."""
        o, fed = self.options, self.config.federation
        if o.lambda_lr >= 0:
            return o.lambda_lr
        m = fed.clients_per_round
        return m / (2 * fed.trainable_clients**2) if o.lambda_step == "ascent" else 1 / (2 * m)

    def init_global(self, model, generator):
        if self.options.lambda_step == "one-step":
            return GlobalState(params=model.trainable_state())
        clients = self.config.federation.clients
        return GlobalState(
            params=model.trainable_state(), server={LAMBDA: torch.full((clients,), 1.0 / clients, dtype=torch.float64)}
        )

    def aggregate(self, round, state, updates):
        updates = with_data(updates)
        models, losses = [u.params for u in updates], client_losses(updates)
        if self.options.lambda_step == "one-step":
            weights = afl_one_step_weights(losses, [u.num_samples for u in updates], self.lambda_lr)
            return GlobalState(params=weighted_mean(models, weights), server=state.server)
        lambdas = state.server[LAMBDA]
        clients = [u.client_id for u in updates]
        weights = lambdas[clients]
        params = weighted_mean(models, weights) if weights.sum() > 0 else state.params  # no mass here: no step
        scale = self.config.federation.trainable_clients / len(updates)  # M / m: unbiased under uniform sampling
        lambdas = afl_lambda_step(lambdas, clients, losses, self.lambda_lr, scale)
        return GlobalState(params=params, server={**state.server, LAMBDA: lambdas})
