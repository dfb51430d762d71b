"""The attacks on split learning put together (FedV, FedVZ, FESTA): what the server received and computed in a
captured round in, scored results out.

The attacker is the server. It holds the encoder and what passed the cut at each local step: the smashed features a
client's head sent, the encoder's output it computed from them and the gradient in that output the client's tail
returned. It does not hold a client's head and tail; it assumes them (``prior``): the round's broadcast ones, which a
client starts from after an average, or the backbone's pretrained ones. A client's rows are read only afterwards, to
score what the attack produced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from raysim.attacks import scores
from raysim.attacks.capture import Captured
from raysim.attacks.harness import Reconstruction, attacker_model, client_plan, public_rows, scored
from raysim.attacks.inverse_network import InverseSettings, invert_by_network
from raysim.attacks.label_leakage import leaked_labels, logit_gradients
from raysim.attacks.smashed import SmashedSettings, invert_smashed
from raysim.base.errors import ConfigError
from raysim.config import Config
from raysim.core.registry import get_method
from raysim.core.training import model_inputs

HEAD_PRIORS = ("broadcast", "pretrained")  # the client head and tail a split-learning attacker assumes


def refuse_unless_split_learning(config: Config) -> None:
    """Refuse (one line) a method whose clients send no cut-layer features."""
    if not get_method(config.method).split_learning:
        raise ConfigError(
            f"{config.method} is not split learning: its clients send no smashed features; attack fedv, fedvz or "
            "festa, or attack an update with inverting or april"
        )


def client_model(captured: Captured, prior: str):
    """(the client's model as the attacker assumes it, its first and last server block): the run's model without
    the server's blocks, holding the ``prior`` head and tail, frozen, in training mode as the client ran it."""
    if prior not in HEAD_PRIORS:
        raise ConfigError(f"unknown --prior {prior!r}; choose one of {', '.join(HEAD_PRIORS)}")
    model, method = attacker_model(captured.config, captured.shards.info.num_classes, None)
    cut, stop = method.server_segment(len(model.vit.blocks))
    model.offload(cut, stop, nn.Identity())
    if prior == "broadcast":
        model.load_trainable(captured.broadcast.params)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.train(), cut, stop


def step_tensors(found: dict[int, list[torch.Tensor]], captured: Captured, client: int, step: int) -> torch.Tensor:
    """What ``client`` passed at local step ``step`` (1-based), or a one-line error naming the steps it took."""
    steps = found.get(client, [])
    if not 1 <= step <= len(steps):
        raise ConfigError(
            f"client {client} sent smashed features at {len(steps)} local steps in round {captured.round}; pass "
            f"--step between 1 and {len(steps)}"
        )
    return steps[step - 1]


def reconstruct_smashed(
    captured: Captured, client: int, step: int, prior: str, settings: SmashedSettings | InverseSettings
) -> Reconstruction:
    """Smashed-data inversion of the features ``client`` sent at local step ``step`` of the captured round, through
    the ``prior`` head: by search (:class:`SmashedSettings`) or by an inverse network trained on the public pool
    (:class:`InverseSettings`, :func:`public_pool`); scored against the rows of that step."""
    observed = step_tensors(captured.smashed, captured, client, step)
    model, cut, _ = client_model(captured, prior)

    def head(x):
        return model.run_blocks(model.embed(x), 0, cut)[0]

    size, mean, std = model.input_spec
    box = scores.model_box(mean, std)
    if isinstance(settings, InverseSettings):
        public = public_pool(captured, client, model, settings.public_rows)
        inversion = invert_by_network(head, observed, public, model.vit.patch_embed.patch_size[0], box, settings)
    else:
        inversion = invert_smashed(head, observed, (len(mean), size, size), box, settings)
    (rows,) = step_rows(captured, client, [step], captured.smashed[client])
    return scored(captured, client, model, inversion.inputs, None, inversion.loss, inversion.seconds, rows)


def public_pool(captured: Captured, client: int, model, rows: int) -> torch.Tensor:
    """The first ``rows`` of the attacker's public data (:func:`~raysim.attacks.harness.public_rows`) in the
    model's input space."""
    return model_inputs(model, public_rows(captured, client, rows).images[:rows], torch.device("cpu"))


@dataclass
class LabelReading:
    """The labels of one client's rows at some of its local steps (``steps``, 1-based) read off its returned
    gradients, beside the true ones (step by step, each in the batch's order), and the least-squares fit's largest
    relative residual over those rows."""

    client: int
    steps: tuple[int, ...]
    labels: list[int]
    true_labels: list[int]
    residual: float
    seconds: float

    @property
    def accuracy(self) -> float:
        return float(np.mean(np.equal(self.labels, self.true_labels)))


def read_labels(captured: Captured, client: int, steps: list[int] | None, prior: str) -> LabelReading:
    """The labels of the rows ``client`` trained on at local ``steps`` (None: every step it took) of the captured
    round, from the gradients its tail returned there and the encoder outputs the server computed
    (:mod:`raysim.attacks.label_leakage`), through the ``prior`` tail; scored against the rows of each step in the
    client's own batch order."""
    steps = list(range(1, len(captured.returned.get(client, [])) + 1)) if steps is None else steps
    if not steps:
        raise ConfigError(f"client {client} took no local step in round {captured.round}: it returned no gradient")
    passed = [
        (
            step_tensors(captured.encoder_outputs, captured, client, step),
            step_tensors(captured.returned, captured, client, step),
        )
        for step in steps
    ]
    start = time.perf_counter()
    model, cut, stop = client_model(captured, prior)
    model.double()
    size, mean, _ = model.input_spec
    with torch.no_grad():  # the prompt segments' sizes after the head: they do not depend on the input
        _, sizes = model.run_blocks(model.embed(torch.zeros(1, len(mean), size, size, dtype=torch.float64)), 0, cut)

    def tail(z):
        return model.head_from(model.run_blocks((z, sizes), stop, len(model.vit.blocks)))

    labels, residual = [], 0.0
    for outputs, returned in passed:
        r, fit = logit_gradients(tail, outputs, returned)
        labels += leaked_labels(r).tolist()
        residual = max(residual, float(fit.max()))
    seconds = time.perf_counter() - start
    return LabelReading(client, tuple(steps), labels, step_labels(captured, client, steps), residual, seconds)


def step_rows(captured: Captured, client: int, steps: list[int], taken: list[torch.Tensor]) -> list[np.ndarray]:
    """The indices (among ``client``'s training rows) of the rows it trained on at local ``steps``, step by step, each
    in its batch's order: the client's own batch plan (:func:`~raysim.core.training.batch_plan`, from the run seed,
    the round and the client), checked against what it passed at each step (``taken``), read only to score."""
    plan = client_plan(captured, client)
    if len(plan) != len(taken) or any(len(plan[step - 1]) != len(taken[step - 1]) for step in steps):
        raise ConfigError(
            f"client {client}'s {len(taken)} steps in round {captured.round} are not its batch plan's {len(plan)}; "
            "its rows cannot be scored"
        )
    return [plan[step - 1] for step in steps]


def step_labels(captured: Captured, client: int, steps: list[int]) -> list[int]:
    """The labels of the rows ``client`` trained on at local ``steps``, step by step, each in its batch's order."""
    labels = np.asarray(captured.shards.train(client).labels)
    return [int(y) for rows in step_rows(captured, client, steps, captured.returned[client]) for y in labels[rows]]
