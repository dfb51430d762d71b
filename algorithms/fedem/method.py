"""FedEM (Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a Mixture of Distributions",
NeurIPS 2021), a SGPT baseline (Table 1): K shared components, here K prompt + head sets on the frozen backbone,
and a mixture weight vector pi_i per client (its state). Each participation (Alg. 1):

    E-step:  q(z_s = k) = pi_k exp(-l(f_k(x_s), y_s)) / sum_k' pi_k' exp(-l(f_k'(x_s), y_s))   (all training rows)
    M-step:  pi_k <- (1 / N_i) sum_s q(z_s = k)
    local:   per component k, E epochs on (1 / B) sum_{s in batch} q(z_s = k) l(f_k(x_s), y_s)
    server:  theta_k <- sum_i (N_i / N) theta_k^i
    predict: p(y | x) = sum_k pi_k softmax(f_k(x))

K = 3 and pi = 1/K at first: the authors' defaults (``utils/args.py``); components start from different draws.
Deviations: the authors' server mixes in the clients not sampled (their stale copies, an implicit server step of
the sampled share); here the sampled clients' weighted mean, like every other method. pi travels with the
parameters as ``extra.mixture`` (K floats, the uniform prior; a client keeps and is evaluated with its own), and
unseen clients are evaluated with the prior (the paper fits their pi by EM). Each participation costs K forwards over
the client's rows (E-step) and K x the training.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch.nn import functional as F

from raysim.algorithms.fedavg.method import FedAvg
from raysim.base.prompts import PromptSlot, PromptSpec, xavier_prompt
from raysim.base.seeding import Purpose, derive_seed
from raysim.core import training
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.protocol import ModelParts, Personalised, implements
from raysim.ops import mixture
from raysim.ops.hypernet import uniform

MIXTURE = "extra.mixture"


def component(k: int) -> tuple[str, str, str]:
    """The parameter names of component k: prompts, head weight, head bias."""
    return f"extra.prompts_{k}", f"extra.head_weight_{k}", f"extra.head_bias_{k}"


@implements("fedem")
class FedEM(Personalised, FedAvg):
    record_dp = (
        "its clients train each of K components on the same rows (K times the accounted steps), weighting each row by "
        "a mixture fitted to all its rows"
    )

    def parts(self, vit, generator) -> ModelParts:
        o, dim, classes = self.options, vit.embed_dim, vit.num_classes
        slot = PromptSlot("component", (0,), length=o.prompt_length, dynamic=True)
        extras = {}
        for k in range(o.components):
            prompts, weight, bias = (name.removeprefix("extra.") for name in component(k))
            extras[prompts] = torch.nn.Parameter(xavier_prompt(vit, (1, o.prompt_length, dim), generator))
            extras[weight] = torch.nn.Parameter(uniform((classes, dim), 1 / math.sqrt(dim), generator))
            extras[bias] = torch.nn.Parameter(uniform((classes,), 1 / math.sqrt(dim), generator))
        extras["mixture"] = torch.nn.Parameter(torch.full((o.components,), 1.0 / o.components))  # never trained
        return ModelParts(PromptSpec((slot,), head_pooling=o.head_pooling, train_head=False), extras)

    def logits(self, model, x: torch.Tensor, k: int) -> torch.Tensor:
        prompts, weight, bias = (model.extra[name.removeprefix("extra.")] for name in component(k))
        features = model(x, {"component": prompts[None].expand(len(x), -1, -1, -1)}, pre_logits=True)
        return F.linear(features, weight, bias)

    @torch.no_grad()
    def losses(self, ctx, data) -> torch.Tensor:
        """``[K, N]`` each component's loss on each training row (the E-step's input)."""
        out = []
        for rows in training.batched_rows(len(data), training.PASS_BATCH):
            x = training.model_inputs(ctx.model, data.images[rows], ctx.device)
            y = torch.tensor(data.labels[rows], device=x.device)
            components = range(self.options.components)
            out.append(
                torch.stack([F.cross_entropy(self.logits(ctx.model, x, k), y, reduction="none") for k in components])
            )
        return torch.cat(out, dim=1).cpu()

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model = ctx.model
        model.load_trainable(broadcast.params)
        if len(data) == 0:
            return ClientUpdate(
                ctx.client_id, 0, model.trainable_state(), metrics=training.local_train(ctx, data, None)
            )
        prior = broadcast.params[MIXTURE] if client_state is None else client_state[MIXTURE]
        q = mixture.responsibilities(prior, self.losses(ctx, data)).float()
        metrics = {"steps": 0, "samples": 0, "compute_s": 0.0, "train_loss": 0.0}
        for k in range(self.options.components):

            def objective(x, y, rows, k=k):
                return (q[rows, k].to(x.device) * F.cross_entropy(self.logits(model, x, k), y, reduction="none")).mean()

            with model.training_only(set(component(k))):
                block = training.local_train(
                    replace(ctx, seed=derive_seed(ctx.seed, Purpose.BLOCK, k)), data, objective
                )
            metrics = {key: metrics[key] + block[key] for key in metrics}  # train_loss: the EM objective, summed
        state = {MIXTURE: mixture.mixture_weights(q).float()}
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics, state=state)

    def eval_params(self, params, client_state):
        return params if client_state is None else {**params, MIXTURE: client_state[MIXTURE]}

    def predict(self, model, x, data, rows):
        """log sum_k pi_k softmax(f_k(x)) with the loaded pi."""
        stacked = torch.stack([self.logits(model, x, k) for k in range(self.options.components)])
        return mixture.mixture_log_probs(stacked, model.extra["mixture"])

    def aggregate(self, round, state, updates) -> GlobalState:
        """The components' sample-weighted mean; the mixture prior stays uniform."""
        new = super().aggregate(round, state, updates)
        new.params[MIXTURE] = state.params[MIXTURE]
        return new
