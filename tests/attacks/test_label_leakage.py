"""Label leakage from the gradients split-learning tails return: the least-squares logit gradient by hand, exact
labels through the tail that made the gradients and not through another, the captured gradients against those the
server received (bit for bit), the rows of a recorded run and the command's run."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from raysim.attacks.capture import capture
from raysim.attacks.label_leakage import leaked_labels, logit_gradients
from raysim.attacks.recorded import recorded_config
from raysim.attacks.split_learning import read_labels
from raysim.base.errors import ConfigError
from raysim.cli import main


def test_the_logit_gradient_by_hand():
    """logits = W z with W = [[1, 2, 0], [0, 1, 1]]; p = (0.7, 0.3), y = 0: g = W^T (p - e_0) = (-0.3, -0.3, 0.3)."""
    weight = torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    r, residual = logit_gradients(
        lambda z: z[:, 0] @ weight.T, torch.zeros(1, 1, 3), torch.tensor([[[-0.3, -0.3, 0.3]]])
    )
    assert torch.allclose(r, torch.tensor([[-0.3, 0.3]], dtype=torch.float64)) and float(residual) < 1e-12
    assert leaked_labels(r).tolist() == [0]


def tail_of(seed: int, width: int = 16, classes: int = 10):
    """A tail as a ViT's: the class token through LayerNorm and a linear classifier, in float64, from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        norm, head = torch.nn.LayerNorm(width).double(), torch.nn.Linear(width, classes).double()
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
    return lambda z: head(norm(z[:, 0]))


def test_a_batchs_labels_come_back_through_the_tail_that_made_its_gradient():
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(6, 3, 16, generator=generator, dtype=torch.float64)
    y = torch.tensor([3, 3, 0, 9, 5, 1])
    tail = tail_of(0)
    zg = z.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.cross_entropy(tail(zg), y), zg)
    r, residual = logit_gradients(tail, z, g)
    assert leaked_labels(r).tolist() == y.tolist() and float(residual.max()) < 1e-10
    assert torch.allclose(r, (torch.softmax(tail(z), 1) - F.one_hot(y, 10)) / 6)  # (p - onehot(y)) / B
    r, residual = logit_gradients(tail_of(1), z, g)
    assert leaked_labels(r).tolist() != y.tolist() and float(residual.min()) > 0.1


def test_more_classes_than_the_tails_input_has_directions_is_refused():
    """A class-token tail of width 16 has a Jacobian of rank at most 16 (15: LayerNorm removes the mean); 20 classes'
    logit gradients are not determined by the 16 numbers returned."""
    tail = tail_of(0, width=16, classes=20)
    z = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ConfigError, match="20 logits depend on its input through a Jacobian of rank 15"):
        logit_gradients(tail, z, torch.ones_like(z))


def test_one_row_whose_jacobian_lacks_rank_is_refused_too():
    """A ReLU before the head: the second row's inputs are all negative, so its logits do not depend on them (rank 0)
    while the first row's Jacobian has full rank."""
    head = torch.nn.Linear(8, 4, dtype=torch.float64)

    def tail(z: torch.Tensor) -> torch.Tensor:
        return head(torch.relu(z[:, 0]))

    z = torch.stack([torch.ones(1, 8), -torch.ones(1, 8)]).double()
    with pytest.raises(ConfigError, match="4 logits depend on its input through a Jacobian of rank 0"):
        logit_gradients(tail, z, torch.ones_like(z))


def test_the_captured_outputs_and_returned_gradients_are_the_servers_bit_for_bit(split_run):
    uri, run_id, _, (computed, returned) = split_run
    captured = capture(recorded_config(uri, run_id), 2)
    clients = {client for (r, client) in returned if r == 2 and client in captured.updates}
    assert clients and set(captured.returned) == clients == set(captured.encoder_outputs)
    for client in clients:
        for found, made in ((captured.returned, returned), (captured.encoder_outputs, computed)):
            assert len(found[client]) == len(made[(2, client)]) == len(captured.smashed[client])
            assert all(torch.equal(a, b) for a, b in zip(found[client], made[(2, client)])), client


def test_after_the_average_the_broadcast_tail_reads_every_label_off_the_first_step(split_run):
    """Round 2's clients start from the tails averaged after round 1, which the server holds: every row of their
    first step is read right; round 1's clients drew their own tails, which the server never saw."""
    uri, run_id, _, _ = split_run
    config = recorded_config(uri, run_id)
    late, early = capture(config, 2), capture(config, 1)
    found = [read_labels(late, client, [1], "broadcast") for client in sorted(late.updates)]
    assert all(r.accuracy == 1.0 and r.residual < 1e-3 for r in found), [(r.accuracy, r.residual) for r in found]
    guessed = [read_labels(early, client, [1], "broadcast") for client in sorted(early.updates)]
    assert all(r.accuracy < 0.5 and r.residual > 0.1 for r in guessed), [(r.accuracy, r.residual) for r in guessed]
    with pytest.raises(ConfigError, match="pass --step between 1 and"):
        read_labels(late, min(late.updates), [99], "broadcast")


def test_the_broadcast_tail_reads_the_labels_of_later_steps_as_the_clients_tail_moves(split_run):
    """Each later step of a round-2 client ran through a tail its earlier steps had moved away from the broadcast
    one: the fit is no longer exact, and the labels still come back (every one here)."""
    uri, run_id, _, _ = split_run
    late = capture(recorded_config(uri, run_id), 2)
    client = min(late.updates)
    readings = [read_labels(late, client, [step], "broadcast") for step in range(2, len(late.returned[client]) + 1)]
    assert len(readings) >= 5 and min(r.residual for r in readings) > 1e-3
    assert sum(r.accuracy for r in readings) / len(readings) > 0.9, [r.accuracy for r in readings]
    every = read_labels(late, client, None, "broadcast")
    assert every.steps == tuple(range(1, len(readings) + 2))
    assert every.labels == [
        y for step in [1, *range(2, len(readings) + 2)] for y in read_labels(late, client, [step], "broadcast").labels
    ]


def test_a_label_leakage_attack_is_a_run_nested_under_the_attacked_one(split_run, nested_run):
    uri, run_id, received, _ = split_run
    client = min(c for r, c in received if r == 2)
    args = ["--run", run_id, "--tracking-uri", uri, "--round", "2", "--clients", str(client), "--step", "all"]
    result = CliRunner().invoke(main, ["attack", "label-leakage", *args])
    assert result.exit_code == 0, result.output
    assert re.search(rf"client {client}: \d+ of \d+ labels of its \d+ steps recovered", result.output), result.output
    attack_run = nested_run(uri, run_id, result.output)
    assert attack_run.data.metrics["label_accuracy"] > 0.9 and attack_run.data.params["step"] == "all"
