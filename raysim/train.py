"""Local training and evaluation loops shared by all methods (run inside a worker)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from raysim.data.shards import ClientData
from raysim.models.preprocess import to_model_input

EVAL_BATCH = 256


def make_optimizer(params, cfg) -> torch.optim.Optimizer:
    """The client optimiser from ``TrainConfig`` (fresh every round, as in the papers)."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def model_inputs(model, images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 images -> the backbone's normalised float input (size, mean, std from the model)."""
    size, mean, std = model.input_spec
    return to_model_input(torch.tensor(images), size, mean, std).to(device)


def batches(n: int, batch_size: int, generator: torch.Generator):
    """Shuffled index batches covering ``n`` rows once (one epoch)."""
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size].numpy()


def local_train(ctx, data: ClientData, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                epochs: int | None = None, forward: Callable | None = None) -> dict[str, float]:
    """E epochs of minibatch descent on the model's trainable tensors.

    Args:
        ctx: the :class:`~raysim.method.ClientContext`; its generator fixes the batch order.
        loss_fn: (logits, labels) -> scalar loss.
        forward: (inputs) -> logits; defaults to ``ctx.model``.

    Returns:
        ``train_loss`` (mean over steps of the last epoch), ``steps``, ``samples`` (rows processed).
    """
    model, cfg = ctx.model, ctx.config.train
    epochs = cfg.local_epochs if epochs is None else epochs
    forward = forward or model
    params = [p for p in model.parameters() if p.requires_grad]
    if len(data) == 0 or not params:
        return {"train_loss": float("nan"), "steps": 0, "samples": 0}
    optimizer = make_optimizer(params, cfg)
    generator = ctx.generator()
    labels_all = torch.tensor(data.labels)
    model.train()
    steps, samples, start = 0, 0, time.perf_counter()
    for _ in range(epochs):
        losses = []
        for idx in batches(len(data), cfg.batch_size, generator):
            x = model_inputs(model, data.images[idx], ctx.device)
            y = labels_all[idx].to(ctx.device)
            loss = loss_fn(forward(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            steps, samples = steps + 1, samples + len(idx)
    model.eval()
    return {"train_loss": float(np.mean(losses)), "steps": steps, "samples": samples,
            "compute_s": time.perf_counter() - start}


@torch.no_grad()
def correct_per_row(model, data: ClientData, device: torch.device, forward: Callable | None = None) -> np.ndarray:
    """1.0 where the argmax prediction equals the label, else 0.0, per row (batched)."""
    forward = forward or model
    hits = [np.zeros(0)]
    for start in range(0, len(data), EVAL_BATCH):
        x = model_inputs(model, data.images[start:start + EVAL_BATCH], device)
        y = torch.tensor(data.labels[start:start + EVAL_BATCH]).to(device)
        hits.append((forward(x).argmax(dim=1) == y).cpu().numpy().astype(np.float64))
    return np.concatenate(hits)
