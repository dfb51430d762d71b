"""Inverting Gradients against a whole local training, on tiny models: the simulated update equals torch's SGD (with
momentum and weight decay) step for step, the attack loss is zero at the client's rows in its order, the labels are
counted off the head bias's update, the plan of steps follows the run's settings, and the refusals are one line."""

from __future__ import annotations

import pytest
import torch

from raysim.attacks.labels import HEAD_BIAS, label_counts
from raysim.attacks.local_epoch import LocalSteps, local_steps, rows_reached, simulated_update, update_loss
from raysim.attacks.observed import observed_update, refuse_unless_sgd_updates
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.messages import Broadcast, ClientUpdate


class Small(torch.nn.Module):
    """Two layers with a nonlinearity, the last named like the ViT's head: 1 x 3 x 3 images, ``classes`` classes."""

    input_spec = (3, (0.0,), (1.0,))

    def __init__(self, classes: int, dtype=torch.float32):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(9, 6, dtype=dtype)
        self.vit = torch.nn.Module()
        self.vit.head = torch.nn.Linear(6, classes, dtype=dtype)

    def forward(self, x):
        return self.vit.head(torch.tanh(self.body(x.flatten(1))))


def trained(model, x, labels, batches, epochs, lr, momentum, decay):
    """What torch's SGD sends after ``epochs`` passes of the rows in order, ``batches`` rows a step: (w_0, w_T)."""
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=decay)
    for _ in range(epochs):
        first = 0
        for rows in batches:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[first : first + rows]), labels[first : first + rows]).backward()
            optimizer.step()
            first += rows
    return start, {name: p.detach().clone() for name, p in model.named_parameters()}


def test_the_simulated_update_is_torchs_sgd_with_momentum_and_weight_decay():
    model = Small(4, torch.float64)
    x, labels = torch.randn(5, 1, 3, 3, dtype=torch.float64), torch.tensor([0, 3, 3, 1, 2])
    start, sent = trained(model, x, labels, [2, 2, 1], epochs=2, lr=0.3, momentum=0.9, decay=0.01)
    model.load_state_dict(start)
    steps = LocalSteps(0.3, 0.9, 0.01, (2, 2, 1, 2, 2, 1))
    made = simulated_update(model, start, x, labels, steps)
    for name in start:
        assert torch.allclose(made[name], sent[name] - start[name], rtol=1e-10, atol=1e-12), name


def test_the_simulated_update_takes_the_rows_dtype_for_the_float64_refinement():
    model = Small(4)
    x, labels = torch.randn(2, 1, 3, 3), torch.tensor([0, 3])
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    steps = LocalSteps(0.3, 0.9, 0.01, (1, 1))
    single = simulated_update(model, start, x, labels, steps)
    double = simulated_update(model.double(), start, x.double(), labels, steps)
    for name in start:
        assert double[name].dtype == torch.float64, name
        assert torch.allclose(double[name].float(), single[name], atol=1e-6), name


def test_the_attack_loss_is_zero_at_the_rows_in_the_clients_order_and_not_elsewhere():
    model = Small(4, torch.float64)
    x, labels = torch.randn(4, 1, 3, 3, dtype=torch.float64), torch.tensor([1, 2, 0, 1])
    start, sent = trained(model, x, labels, [2, 2], epochs=1, lr=0.5, momentum=0.0, decay=0.0)
    model.load_state_dict(start)
    observed = {name: sent[name] - start[name] for name in start}
    steps = LocalSteps(0.5, 0.0, 0.0, (2, 2))
    assert float(update_loss(model, observed, start, x, labels, steps, tv=0.0).detach()) == pytest.approx(0, abs=1e-12)
    assert float(update_loss(model, observed, start, x.flip(0), labels, steps, tv=0.0).detach()) > 1e-4
    assert torch.autograd.gradcheck(
        lambda v: update_loss(model, observed, start, v, labels, steps, tv=0.0), (x.clone().requires_grad_(True),)
    )


def test_the_labels_are_counted_off_the_bias_update_of_a_local_epoch():
    model = Small(10)
    labels = torch.tensor([7, 2, 7, 5, 2, 7])
    x = torch.randn(6, 1, 3, 3, generator=torch.Generator().manual_seed(1))
    start, sent = trained(model, x, labels, [3, 3], epochs=2, lr=0.1, momentum=0.9, decay=0.0)
    assert label_counts({HEAD_BIAS: sent[HEAD_BIAS] - start[HEAD_BIAS]}, 6).tolist() == [2, 2, 5, 7, 7, 7]


def test_label_counts_by_hand():
    # rises above the median (0) of 0.3, 0.1 and 0.2 for 6 rows: shares 3, 1 and 2
    bias = torch.tensor([0.3, 0.0, 0.1, 0.0, 0.0, 0.2, -0.05])
    assert label_counts({HEAD_BIAS: bias}, 6).tolist() == [0, 0, 0, 2, 5, 5]
    with pytest.raises(ConfigError, match="did not move"):
        label_counts({HEAD_BIAS: torch.zeros(5)}, 2)


def sgd_config(**train):
    return build_config("fedavg", [{"train": {"optimizer": "sgd", **train}}])


def test_the_steps_follow_the_batch_size_and_epochs_and_stop_where_the_client_did():
    config = sgd_config(batch_size=4, local_epochs=2, lr=0.05, momentum=0.9, weight_decay=0.01)
    update = ClientUpdate(0, 10, {}, metrics={"steps": 6})
    assert local_steps(config, update) == LocalSteps(0.05, 0.9, 0.01, (4, 4, 2, 4, 4, 2))
    assert local_steps(config, ClientUpdate(0, 10, {}, metrics={"steps": 4})).batches == (4, 4, 2, 4)  # a straggler


def test_a_straggler_cut_in_its_first_epoch_is_attacked_on_the_rows_its_batches_read():
    config = sgd_config(batch_size=4, local_epochs=2)
    reached = [rows_reached(config, ClientUpdate(0, 10, {}, metrics={"steps": steps})) for steps in (1, 2, 3, 6)]
    assert reached == [4, 8, 10, 10]  # one step of a client of 10 rows: the gradient of 4
    assert rows_reached(sgd_config(batch_size=16), ClientUpdate(0, 3, {}, metrics={"steps": 1})) == 3


def test_refusals_are_one_line():
    with pytest.raises(ConfigError, match="train.optimizer=adamw"):
        refuse_unless_sgd_updates(build_config("fedavg", [{"train": {"optimizer": "adamw"}}]))
    private = {"mode": "record", "noise_multiplier": 1.0, "delta": 1e-5}
    with pytest.raises(ConfigError, match="2 local epochs' steps are clipped and noised"):
        refuse_unless_sgd_updates(
            build_config("fedavg", [{"train": {"optimizer": "sgd", "local_epochs": 2}, "privacy": private}])
        )
    refuse_unless_sgd_updates(sgd_config(local_epochs=3))  # several epochs of plain SGD: attacked
    tiered = ClientUpdate(0, 2, {"w": torch.zeros(1)}, trained={"w": torch.ones(1, dtype=torch.bool)})
    with pytest.raises(ConfigError, match="capacity tier"):
        observed_update(tiered, Broadcast({"w": torch.zeros(1)}), sgd_config())


def test_a_recorded_clients_two_epochs_are_matched_at_its_rows_and_attacked_from_the_cli(tracked_run):
    """FedAvg clients of 6 rows train 2 epochs of one batch each (batch 64), momentum 0.9: the simulated training at
    a client's own rows gives the update the server received (the loss at the truth is 0 to rounding), and
    ``raysim attack inverting`` attacks it, with its labels counted off the bias."""
    from click.testing import CliRunner

    from raysim.attacks.capture import capture
    from raysim.attacks.harness import attacker_model
    from raysim.attacks.recorded import recorded_config
    from raysim.cli import main
    from raysim.core.training import model_inputs

    train = {"optimizer": "sgd", "batch_size": 64, "local_epochs": 2, "momentum": 0.9}
    uri, run_id = tracked_run("fedavg", {"federation": {"clients": 200, "participation": 0.05}, "train": train})
    captured = capture(recorded_config(uri, run_id), 1)
    client = min(captured.updates)
    update, broadcast = captured.updates[client], captured.broadcast
    model, _ = attacker_model(captured.config, captured.shards.info.num_classes, broadcast.params)
    data = captured.shards.train(client)
    x, y = model_inputs(model, data.images, torch.device("cpu")), torch.as_tensor(data.labels).long()
    observed = observed_update(update, broadcast, captured.config)
    steps = local_steps(captured.config, update)
    assert steps.batches == (6, 6) and steps.momentum == 0.9
    model.train()
    loss = update_loss(model, observed, broadcast.params, x, y, steps, tv=0.0)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-5)
    assert label_counts(observed, len(y)).tolist() == sorted(y.tolist())

    args = ["--run", run_id, "--tracking-uri", uri, "--clients", str(client), "--iterations", "2", "--refine", "2"]
    result = CliRunner().invoke(main, ["attack", "inverting", *args])  # the refinement's float64 local training
    assert result.exit_code == 0, result.output
    assert f"client {client}: PSNR" in result.output and "attack run " in result.output


def test_a_straggler_cut_in_its_first_epoch_is_scored_against_the_rows_its_one_step_read():
    """A client of 200 rows stopped by the deadline after one step of 64 (``stragglers=partial``): its batch plan
    names the rows the step read (the attack loss at them is 0 to rounding), and the reconstruction is paired with
    those rows alone, never with rows that are in no part of its update."""
    from raysim.attacks.capture import capture
    from raysim.attacks.harness import attacker_model, client_plan, reconstruct
    from raysim.attacks.inverting import InvertingSettings, attack_loss
    from raysim.attacks.observed import observed_gradient
    from raysim.core.training import model_inputs
    from raysim.testing.smoke import smoke_config

    config = smoke_config(
        "fedavg",
        {
            "train": {"optimizer": "sgd", "batch_size": 64},
            "federation": {"rounds": 1, "deadline_s": 4.0, "stragglers": "partial"},
            "systems": {"speed": "lognormal:3,0.5"},
        },
    )
    captured = capture(config, 1)
    client = next(c for c, u in sorted(captured.updates.items()) if u.metrics["steps"] == 1 and u.num_samples > 64)
    update, broadcast = captured.updates[client], captured.broadcast
    read = client_plan(captured, client)[0]
    model, _ = attacker_model(captured.config, captured.shards.info.num_classes, broadcast.params)
    data = captured.shards.train(client)
    x = model_inputs(model, data.images[read], torch.device("cpu"))
    gradient = observed_gradient(update, broadcast, captured.config)
    model.train()
    loss = attack_loss(model, gradient, x, torch.as_tensor(data.labels[read]).long(), tv=0.0)
    assert len(read) == 64 and float(loss.detach()) == pytest.approx(0.0, abs=1e-5)
    found = reconstruct(captured, client, InvertingSettings(iterations=1))
    assert len(found.originals) == 64 and sorted(found.true_labels) == sorted(data.labels[read].tolist())
