"""Local training and evaluation loops shared by all methods (run inside a worker): what a method's
``client_update`` and ``predict`` are written with."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np
import torch

from raysim.base.preprocess import to_model_input
from raysim.data.shards import ClientData

PASS_BATCH = 256
"""Rows per no-grad pass inside training and set-up: a method's per-row losses and representations, cached row
features, mean inputs."""
CPU_EVALUATION_BATCH, DEVICE_EVALUATION_BATCH = 64, 256


def evaluation_batch(device: torch.device) -> int:
    """Rows per forward of an evaluation (accuracy, an attack's per-row scores) on ``device``: 64 on a CPU, where a
    larger batch is no faster and the heap its activations leave grows with it (docs/performance.md, "Evaluation and
    the heap"), 256 on an accelerator, which a larger batch fills. The offline default's logits are the same bits at
    batches of 32 to 256 in fp32 on an Intel Xeon (AMX); an argmax does not move with rounding."""
    return CPU_EVALUATION_BATCH if device.type == "cpu" else DEVICE_EVALUATION_BATCH


def batched_rows(count: int, batch: int) -> Iterator[np.ndarray]:
    """The row numbers ``0 .. count - 1``, ``batch`` of them at a time."""
    for start in range(0, count, batch):
        yield np.arange(start, min(start + batch, count))


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
        yield order[start : start + batch_size].numpy()


def batch_plan(n: int, batch_size: int, epochs: int, generator: torch.Generator) -> list[list[np.ndarray]]:
    """Every epoch's index batches, drawn as :func:`local_train` draws them (cohort training plans ahead)."""
    return [list(batches(n, batch_size, generator)) for _ in range(epochs)]


def within_work(plan: list[list[np.ndarray]], work: float) -> list[tuple[int, np.ndarray]]:
    """The (epoch, rows) steps of ``plan`` a client gets through with ``work`` (a share of its samples in (0, 1]):
    the longest prefix whose samples stay within ``floor(work * all samples)`` (a straggler's partial round)."""
    steps = [(epoch, rows) for epoch, batches_ in enumerate(plan) for rows in batches_]
    if work >= 1:
        return steps
    # rounded first: a budget of a whole number of samples computed as a share (16 / 49 * 49) may fall just below it
    budget = int(round(work * sum(len(rows) for _, rows in steps), 9))
    done = np.cumsum([len(rows) for _, rows in steps])
    return steps[: int(np.searchsorted(done, budget, side="right"))]


def steps_per_round(rows: int, cfg, epochs: int | None = None) -> int:
    """Local steps :func:`local_train` takes on ``rows`` rows: epochs x ceil(rows / batch size)."""
    epochs = cfg.local_epochs if epochs is None else epochs
    return epochs * -(-rows // cfg.batch_size)


Objective = Callable[[torch.Tensor, torch.Tensor, np.ndarray], torch.Tensor]  # (inputs, labels, rows) -> loss
# (optimiser, trained tensors, closure computing the batch's loss) -> that loss, after one update
Step = Callable[[torch.optim.Optimizer, list[torch.Tensor], Callable[[], torch.Tensor]], torch.Tensor]


def plain_step(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], closure) -> torch.Tensor:
    """One descent step: the loss's gradient, then the optimiser's update."""
    optimizer.zero_grad(set_to_none=True)
    loss = closure()
    loss.backward()
    optimizer.step()
    return loss


def local_train(
    ctx,
    data: ClientData,
    objective: Objective,
    epochs: int | None = None,
    extra: tuple[torch.Tensor, ...] = (),
    step: Step = plain_step,
) -> dict[str, float]:
    """E epochs of minibatch descent on the parameters of ``ctx.model`` that currently require grad.

    Args:
        ctx: the :class:`~raysim.core.protocol.ClientContext`; its generator fixes the batch order.
        objective: (inputs, labels, rows) -> scalar loss; ``rows`` index ``data`` (for its cached features).
        epochs: defaults to ``train.local_epochs``.
        extra: tensors outside the model (requiring grad) the same optimiser trains (Fed-RoD's personal head).
        step: how one batch updates the tensors (FedSAM's two-pass sharpness-aware step, FedPR's projected one);
            under record-level DP (``ctx.private``) its DP-SGD step and batches replace the plain ones.

    Returns:
        ``train_loss`` (mean over steps of the last epoch reached), ``steps``, ``samples`` (rows processed),
        ``compute_s``. A straggler's partial round (``ctx.work`` < 1) takes only the first steps
        (:func:`within_work`).
    """
    model, cfg = ctx.model, ctx.config.train
    epochs = cfg.local_epochs if epochs is None else epochs
    params = [p for p in model.parameters() if p.requires_grad] + list(extra)
    if len(data) == 0 or not params:
        return {"train_loss": float("nan"), "steps": 0, "samples": 0, "compute_s": 0.0}
    private = ctx.private  # record-level DP-SGD: its own batches and step (the config refuses a method's own step)
    draw = private.plan if private is not None else batch_plan
    plan = within_work(draw(len(data), cfg.batch_size, epochs, ctx.generator()), ctx.work)
    optimizer = make_optimizer(params, cfg)
    labels_all = torch.tensor(data.labels)
    model.train()
    losses, last_epoch, samples, start = [], 0, 0, time.perf_counter()
    for epoch, rows in plan:
        if epoch != last_epoch:
            losses, last_epoch = [], epoch
        x = model_inputs(model, data.images[rows], ctx.device)
        y = labels_all[rows].to(ctx.device)
        if private is not None:
            loss = private.step(optimizer, params, objective, x, y, rows)
        else:
            loss = step(optimizer, params, partial(objective, x, y, rows))
        losses.append(loss.item())
        samples += len(rows)
    model.eval()
    return {
        "train_loss": float(np.mean(losses)) if losses else float("nan"),
        "steps": len(plan),
        "samples": samples,
        "compute_s": time.perf_counter() - start,
    }


@torch.no_grad()
def correct_per_row(
    model,
    data: ClientData,
    device: torch.device,
    forward: Callable[[torch.Tensor, np.ndarray], torch.Tensor] | None = None,
) -> np.ndarray:
    """1.0 where the argmax prediction equals the label, else 0.0, per row (batched).

    ``forward(inputs, rows) -> logits`` defaults to ``model(inputs)``; ``rows`` index ``data``.
    """
    hits = [np.zeros(0)]
    for rows in batched_rows(len(data), evaluation_batch(device)):
        x = model_inputs(model, data.images[rows], device)
        logits = forward(x, rows) if forward else model(x)
        hits.append((logits.argmax(dim=1).cpu() == torch.tensor(data.labels[rows])).numpy().astype(np.float64))
    return np.concatenate(hits)


@torch.no_grad()
def mean_loss(
    model, data: ClientData, device: torch.device, forward: Callable[[torch.Tensor, np.ndarray], torch.Tensor]
) -> float:
    """Mean cross-entropy of ``forward(inputs, rows) -> logits`` over every row of ``data`` (no grad); NaN if empty."""
    total = 0.0
    for rows in batched_rows(len(data), PASS_BATCH):
        logits = forward(model_inputs(model, data.images[rows], device), rows)
        labels = torch.tensor(data.labels[rows], device=logits.device)
        total += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
    return total / len(data) if len(data) else float("nan")


@torch.no_grad()
def mean_input(
    model, data: ClientData, device: torch.device, transform: Callable[[torch.Tensor], torch.Tensor] = torch.clone
) -> torch.Tensor:
    """The mean over every row of ``data`` of ``transform(model input)`` (float64; FedMix's mean image, HarmoFL's
    mean amplitude)."""
    total = torch.zeros((), dtype=torch.float64)
    for rows in batched_rows(len(data), PASS_BATCH):
        total = total + transform(model_inputs(model, data.images[rows], device)).double().sum(dim=0).cpu()
    return total / len(data)
