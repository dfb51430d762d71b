"""Cohort training: several clients' local training at once, on one worker, with exactly their own gradients.

With a frozen backbone the clients of a round differ only in their small trainable tensors. Their local steps run
in lockstep: at step t the clients that still have a batch are grouped by batch size, and for each group one
``torch.func.vmap`` of ``grad`` of the method's objective runs the frozen backbone over the group's batches side by
side (batched matrix products), each client's trainable tensors swapped in for its own rows. A client's loss is
its own batch's, so its gradient is exactly its own; the optimiser (SGD with momentum or AdamW, elementwise) keeps a
stacked state and steps only the clients that had a batch. Each client's batch order is drawn as
:func:`raysim.core.training.local_train` draws it, so the numbers equal the per-client loop's within float
tolerance (different matrix-product shapes round differently). Attention runs unfused here (timm's
``fused_attn=False``): the fused kernel's backward has no batching rule.

It pays where one client's batch leaves the device idle (a GPU); on CPUs a batch already fills the cores, so
``train.cohort=auto`` trains in cohorts only where clients train on a GPU
(:func:`raysim.engine.cohort_plan.resolve_cohort`).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from raysim.base.seeding import Purpose, derive_seed
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.protocol import ClientContext, CohortPhase
from raysim.core.training import batch_plan, model_inputs, within_work
from raysim.data.shards import ClientData


class _Objective(torch.nn.Module):
    """Holds the model so that ``functional_call`` swaps its trainable tensors while the objective runs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.objective = None

    def forward(self, x, y, features):
        return self.objective(x, y, features)


class StackedOptimizer:
    """The client optimiser of ``TrainConfig`` over stacked tensors ``[clients, ...]``, each client's slice updated
    as ``torch.optim.SGD`` / ``AdamW`` would update its own tensor, and only on the steps it takes."""

    def __init__(self, params: Tensors, cfg):
        self.params, self.cfg = params, cfg
        self.state = {name: {} for name in params}
        first = next(iter(params.values()), None)
        self.steps = None if first is None else torch.zeros(first.shape[0], dtype=torch.int64, device=first.device)

    @torch.no_grad()
    def step(self, members: torch.Tensor, grads: Tensors) -> None:
        cfg = self.cfg
        members = members.to(self.steps.device)
        self.steps[members] += 1
        for name, g in grads.items():
            p, state = self.params[name][members], self.state[name]
            if cfg.optimizer == "adamw":  # torch's defaults: betas (0.9, 0.999), eps 1e-8
                beta1, beta2 = 0.9, 0.999
                p = p * (1 - cfg.lr * cfg.weight_decay)
                m = state.setdefault("m", torch.zeros_like(self.params[name]))[members].lerp(g, 1 - beta1)
                v = state.setdefault("v", torch.zeros_like(self.params[name]))[members]
                v = v * beta2 + (1 - beta2) * g * g
                t = self.steps[members].double()  # the bias corrections in float64, as torch computes them
                shape = (-1, *([1] * (p.dim() - 1)))
                step_size = (cfg.lr / (1 - beta1**t)).to(p.dtype).reshape(shape)
                root = ((1 - beta2**t) ** 0.5).to(p.dtype).reshape(shape)
                p = p - step_size * (m / (v.sqrt() / root + 1e-8))
                state["m"][members], state["v"][members] = m, v
            else:
                d = g + cfg.weight_decay * p if cfg.weight_decay else g
                if cfg.momentum:
                    buf = state.setdefault("buf", torch.zeros_like(self.params[name]))
                    first = (self.steps[members] == 1).reshape(-1, *([1] * (p.dim() - 1)))
                    d = torch.where(first, d, cfg.momentum * buf[members] + d)
                    buf[members] = d
                p = p - cfg.lr * d
            self.params[name][members] = p


@contextmanager
def unfused_attention(model: torch.nn.Module):
    """timm's attention as plain matrix products while cohort training runs (vmap has no rule for the fused
    kernel's backward)."""
    fused = [m for m in model.modules() if getattr(m, "fused_attn", False)]
    for module in fused:
        module.fused_attn = False
    try:
        yield
    finally:
        for module in fused:
            module.fused_attn = True


def train_cohort(
    method, model, ctxs: list[ClientContext], broadcast: Broadcast, datas: list[ClientData], cfg
) -> list[ClientUpdate]:
    """The clients' local training together; one update per client, in the order given."""
    start = time.perf_counter()
    clients = len(ctxs)
    trained = {
        name: tensor.to(ctxs[0].device).unsqueeze(0).repeat(clients, *([1] * tensor.dim()))
        for name, tensor in broadcast.params.items()
    }
    aux: list[list[list]] = [[] for _ in ctxs]  # per client, per phase, one tensor per step
    metrics = [{"steps": 0, "samples": 0, "rows": len(d)} for d in datas]
    wrapper = _Objective(model)
    model.train()
    with unfused_attention(model):
        for phase in method.cohort_phases(model, broadcast):
            _run_phase(phase, wrapper, ctxs, datas, trained, aux, metrics, cfg)
    model.eval()
    share = (time.perf_counter() - start) / max(1, sum(m["samples"] for m in metrics))
    updates = []
    for c, ctx in enumerate(ctxs):
        metrics[c]["compute_s"] = share * metrics[c]["samples"]
        mine = {name: tensor[c].detach().clone() for name, tensor in trained.items()}
        updates.append(method.cohort_update(ctx, broadcast, mine, aux[c], metrics[c]))
    return updates


def _run_phase(phase: CohortPhase, wrapper: _Objective, ctxs, datas, trained: Tensors, aux, metrics, cfg) -> None:
    """Lockstep steps of one phase; per client, ``train_loss`` is the mean loss of its last epoch's steps."""
    model, device = wrapper.model, ctxs[0].device
    wrapper.objective = phase.objective
    for client_aux in aux:
        client_aux.append([])
    plans = []
    for ctx, data in zip(ctxs, datas):
        seed = ctx.seed if phase.block is None else derive_seed(ctx.seed, Purpose.BLOCK, phase.block)
        epochs = batch_plan(len(data), cfg.batch_size, cfg.local_epochs, torch.Generator().manual_seed(seed))
        plans.append(within_work(epochs, ctx.work))
    optimizer = StackedOptimizer({name: trained[name] for name in phase.names}, cfg)
    last_losses: list[list[float]] = [[] for _ in ctxs]
    for t in range(max((len(p) for p in plans), default=0)):
        by_size: dict[int, list[int]] = {}
        for c, plan in enumerate(plans):
            if t < len(plan):
                by_size.setdefault(len(plan[t][1]), []).append(c)
        for members in by_size.values():
            losses, extra = _group_step(phase, wrapper, model, device, members, plans, t, datas, trained, optimizer)
            for i, c in enumerate(members):
                epoch, rows = plans[c][t]
                if epoch == plans[c][-1][0]:  # the last epoch it reaches (a straggler's partial round may stop early)
                    last_losses[c].append(losses[i])
                metrics[c]["steps"] += 1
                metrics[c]["samples"] += len(rows)
                aux[c][-1].append(extra[i])
    for c, losses in enumerate(last_losses):
        metrics[c]["train_loss"] = float(np.mean(losses)) if losses else math.nan


def _group_step(phase, wrapper, model, device, members, plans, t, datas, trained, optimizer):
    """One step of the clients ``members`` (their batches have one size): gradients by vmap, then the optimiser."""
    index = torch.tensor(members, device=device)  # one copy to the device, not one per indexed tensor
    rows = [plans[c][t][1] for c in members]
    x = torch.stack([model_inputs(model, datas[c].images[r], device) for c, r in zip(members, rows)])
    y = torch.stack([torch.tensor(datas[c].labels[r]) for c, r in zip(members, rows)]).to(device)
    names = sorted(datas[members[0]].features)
    features = {
        n: torch.stack([torch.tensor(datas[c].features[n][r]) for c, r in zip(members, rows)]).to(device) for n in names
    }
    learned = {name: trained[name][index] for name in phase.names}
    fixed = {name: trained[name][index] for name in trained if name not in phase.names}

    def loss_of(learned_c, fixed_c, x_c, y_c, features_c):
        swapped = {f"model.{name}": value for name, value in {**fixed_c, **learned_c}.items()}
        loss, extra = functional_call(wrapper, swapped, (x_c, y_c, features_c))
        return loss, (loss.detach(), extra)

    grads, (losses, extra) = vmap(grad(loss_of, has_aux=True))(learned, fixed, x, y, features)
    optimizer.step(index, grads)
    return losses.tolist(), [e.cpu() for e in extra]
