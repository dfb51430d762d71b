"""FedPR (Feng et al., "Learning Federated Visual Prompt in Null Space for MRI Reconstruction", CVPR 2023), a SGPT
baseline (Tables 1-2), on prompts + head.

Local updates of the prompts are projected on the approximate null space of the global prompt received: for each
prompt layer s with global prompt P_s ``[L, D]``,

    G_s = P_s^T P_s = V S V^T;  B_s = V[:, r:], r = floor(D (1 - ratio));  T_s = B_s B_s^T / ||B_s B_s^T||_F
    u = the optimiser's update of the prompt;  u_s <- u_s T_s (each token row)

so a client learns what the global prompt does not already hold; the head takes plain steps and the server takes
FedAvg's sample-weighted mean. ratio = 0.8 and the Frobenius normalisation (which divides the step by sqrt(D - r))
are the authors' code (``config/different_dataset.py``, ``util/adam_svd.py``; its eigenvalue threshold is computed
and then overwritten, so selection is by ratio alone). Round 1 is unprojected, as there (no aggregated prompt yet).

Deviations: T is recomputed from the received prompt by every client that trains (the authors' server computes it
for the sampled clients, the same under full participation); the base is the run's optimiser, fresh each round
(theirs is Adam with moments kept across rounds); VPT-shallow prompts (SGPT ran every baseline with prompt length 1;
FedPR used deep prompts of 20 tokens on a Swin). G has rank at most L, so whenever r > L the dropped directions
include r - L of zero singular value, chosen by the SVD, as in the authors' code.
"""

from functools import partial

import torch

from raysim.algorithms.fedvpt.method import FedVPT
from raysim.core import training
from raysim.core.messages import ClientUpdate
from raysim.core.protocol import implements
from raysim.ops.nullspace import null_space_projector

PROMPT = "prompts.shallow"


def projected_step(optimizer, params, closure, prompt: torch.Tensor, projectors: torch.Tensor) -> torch.Tensor:
    """The base step, then the prompt's update u (``[S, L, D]``) replaced by u T_s per layer."""
    before = prompt.detach().clone()
    loss = training.plain_step(optimizer, params, closure)
    with torch.no_grad():
        prompt.copy_(before + torch.bmm(prompt - before, projectors))
    return loss


@implements("fedpr")
class FedPR(FedVPT):
    record_dp = "its local step is projected, not the plain step DP-SGD replaces"

    def client_update(self, ctx, broadcast, client_state, data) -> ClientUpdate:
        model, o = ctx.model, self.options
        model.load_trainable(broadcast.params)
        step = training.plain_step
        if ctx.round > 1:
            projectors = torch.stack([null_space_projector(p, o.ratio, o.normalise) for p in broadcast.params[PROMPT]])
            step = partial(projected_step, prompt=model.prompts["shallow"], projectors=projectors.to(ctx.device))
        metrics = training.local_train(
            ctx, data, lambda x, y, rows: self.loss(model, model(x), y, broadcast), step=step
        )
        return ClientUpdate(ctx.client_id, len(data), model.trainable_state(), metrics=metrics)
