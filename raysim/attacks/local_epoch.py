"""Inverting Gradients against a whole local training: the update of several SGD steps, not one gradient.

A client that trains E epochs of batch b on its N rows sends w_T = w_0 after T steps of SGD (learning rate eta,
momentum mu, weight decay lambda, all public training settings; T and N it reports). Inverting Gradients' Section 5
(Geiping, Bauermeister, Dröge, Moeller, NeurIPS 2020, "Federated averaging") attacks it by training the model as the
client did, on N dummy rows, and matching the update that gives to the observed one:

    x* = argmin_{x in [lo, hi]}  1 - cos(U(x, y), w_T - w_0)  +  alpha TV(x),

where U runs the T steps from w_0, differentiable in x (a second derivative per step). The client's order of its rows
is its own secret; the simulation takes the rows in the attacker's order each epoch (the matching of reconstructions
to originals absorbs a relabelling of the rows, not a different split into batches: an epoch of one batch, b >= N, is
modelled exactly).

The labels are counted off the update of the head's bias before the search
(:func:`raysim.attacks.labels.label_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.func import functional_call

from raysim.attacks.inverting import cosine_distance, total_variation
from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.messages import ClientUpdate, Tensors
from raysim.core.training import batch_plan


@dataclass(frozen=True)
class LocalSteps:
    """How a client trained, as the server knows it: SGD's ``lr``, ``momentum`` and ``decay``, and the rows of each
    step in order (``batches``; each epoch covers the rows once)."""

    lr: float
    momentum: float
    decay: float
    batches: tuple[int, ...]


def local_steps(config: Config, update: ClientUpdate) -> LocalSteps:
    """The steps ``update`` took: the batches of the clients' own plan (:func:`~raysim.core.training.batch_plan`,
    ``train.local_epochs`` epochs of ``train.batch_size`` over its rows), cut at the steps it reports (a straggler
    stops early). The plan's order is the client's secret; its batch sizes are not."""
    train = config.train
    order = torch.Generator()  # any: only the batches' sizes are read
    epochs = batch_plan(update.num_samples, train.batch_size, train.local_epochs, order)
    plan = [len(rows) for epoch in epochs for rows in epoch][: int(update.metrics.get("steps", 0))]
    if not plan:
        raise ConfigError(f"client {update.client_id} took no local step; there is no update to attack")
    return LocalSteps(train.lr, train.momentum, train.weight_decay, tuple(plan))


def rows_reached(config: Config, update: ClientUpdate) -> int:
    """How many of ``update``'s rows its local steps read: all of them, or, for a straggler cut before its first
    epoch ended, those of the batches it took (its update holds nothing of the others)."""
    return min(update.num_samples, sum(local_steps(config, update).batches))


def simulated_update(model, start: Tensors, x: torch.Tensor, labels: torch.Tensor, steps: LocalSteps) -> Tensors:
    """w_T - w_0 of the tensors in ``start`` (w_0) after ``steps`` of torch's SGD on the cross-entropy of ``model``
    over the rows ``x``, ``labels`` (each step the next ``batches[k]`` rows, every epoch from the first), in ``x``'s
    dtype; differentiable in ``x``."""
    weights = {name: t.detach().to(x.dtype).clone().requires_grad_(True) for name, t in start.items()}
    names, buffers, first = list(weights), {}, 0
    for rows in steps.batches:
        batch = slice(first, first + rows)
        logits = functional_call(model, weights, (x[batch],))
        grads = torch.autograd.grad(
            F.cross_entropy(logits, labels[batch]), [weights[n] for n in names], create_graph=True
        )
        for name, grad in zip(names, grads, strict=True):
            step = grad + steps.decay * weights[name] if steps.decay else grad
            if steps.momentum:
                step = buffers[name] = steps.momentum * buffers[name] + step if name in buffers else step
            weights[name] = weights[name] - steps.lr * step
        first = (first + rows) % len(x)
    return {name: weights[name] - start[name] for name in names}


def update_loss(model, observed: Tensors, start: Tensors, x, labels, steps: LocalSteps, tv: float) -> torch.Tensor:
    """The cosine distance between the simulated update at ``(x, labels)`` and the ``observed`` one (the tensors it
    names), plus ``tv`` times the total variation of ``x``."""
    made = simulated_update(model, {name: start[name] for name in observed}, x, labels, steps)
    return cosine_distance(list(made.values()), list(observed.values())) + tv * total_variation(x)
