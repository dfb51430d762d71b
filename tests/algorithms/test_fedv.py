"""FedV/FedVZ (seed 001): the SPSA estimator, the server's steps, the cut's autograd, fedround, bytes, determinism."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from raysim.algorithms import _split as split
from raysim.algorithms.fedv import FedV, server_lr
from raysim.config import build_config
from raysim.core import training as train
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.engine.driver import make_simulation, stop
from raysim.ops import spsa
from raysim.testing.smoke import open_simulation, prepared
from raysim.tracking.checkpoint import Checkpoint

TINY = {
    "federation": {"clients": 6, "rounds": 3, "participation": 0.5, "seed": 1, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "iid"},
    "train": {"local_epochs": 1, "batch_size": 16},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
}
TOKENS, WIDTH = 17, 64  # nano: 16 patches of 4x4 on 16x16 images + the class token, width 64


def tiny_encoder(seed: int = 0) -> nn.ModuleList:
    torch.manual_seed(seed)
    return nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])


def quadratic_loss(out: torch.Tensor) -> torch.Tensor:
    target = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    return 0.5 * ((out - target) ** 2).sum()


def test_spsa_estimate_is_unbiased_for_the_true_gradient():
    """E[c z] = E[z z^T] grad = grad: the mean of 20,000 estimates lies within 4 standard errors of the autograd
    gradient in every coordinate (a fixed seed; the central difference is exact for a quadratic loss)."""
    blocks, h, eps = tiny_encoder(), torch.tensor([[0.3, -0.7], [1.1, 0.4]]), 1e-3
    loss = quadratic_loss(split.EncoderServer(blocks)._run(h))
    true = torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(blocks.parameters()))]).double()
    draws = []
    for seed in range(20_000):
        c = spsa.spsa_coefficient(
            quadratic_loss(spsa.perturbed_forward(blocks, h, seed, eps)).item(),
            quadratic_loss(spsa.perturbed_forward(blocks, h, seed, -eps)).item(),
            eps,
        )
        draws.append(c * torch.cat([z.flatten() for _, z in spsa.directions(blocks, seed)]).double())
    draws = torch.stack(draws)
    mean, sem = draws.mean(0), draws.std(0) / math.sqrt(len(draws))
    assert (mean - true).abs().le(4 * sem).all(), (mean, true, sem)
    assert (mean - true).norm() < 0.1 * true.norm()
    # and a single estimate is not the gradient: the test would fail for an estimator without "* z"
    assert not torch.allclose(draws[0], true, rtol=0.1)


def test_perturbed_forward_uses_w_plus_eps_z_and_leaves_the_weights_bit_identical():
    blocks, h = tiny_encoder(), torch.randn(3, 2, generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in blocks.state_dict().items()}
    out = spsa.perturbed_forward(blocks, h, seed=7, scale=0.5)
    manual = tiny_encoder()
    with torch.no_grad():
        for param, z in zip(manual.parameters(), [z for _, z in spsa.directions(blocks, 7)]):
            param.add_(0.5 * z)
    assert torch.allclose(out, manual[1](manual[0](h)), atol=1e-6)
    for key, value in blocks.state_dict().items():
        assert torch.equal(value, before[key])  # bit for bit
    again = [z for _, z in spsa.directions(blocks, 7)]  # z is regenerated, never stored: the same draws
    assert all(torch.equal(a, b) for a, b in zip(again, [z for _, z in spsa.directions(blocks, 7)]))


def test_spsa_step_hand_computed():
    """w <- w - (lr / m) sum_i c_i z_i with z_i regenerated from seed_i."""
    blocks = tiny_encoder()
    w = [p.detach().clone() for p in blocks.parameters()]
    z1, z2 = ([z for _, z in spsa.directions(blocks, s)] for s in (11, 12))
    spsa.spsa_step(blocks, [(11, 2.0), (12, -0.5)], lr=0.1)
    for param, w0, a, b in zip(blocks.parameters(), w, z1, z2):
        assert torch.allclose(param, w0 - 0.1 / 2 * (2.0 * a - 0.5 * b), atol=1e-7)


def test_fedv_server_step_is_the_mean_true_gradient_of_the_clients_last_steps():
    server = split.EncoderServer(tiny_encoder())
    reference = tiny_encoder()
    w = [p.detach().clone() for p in reference.parameters()]
    grads = [torch.zeros_like(p) for p in w]
    for client, seed in ((3, 0), (5, 1)):
        h = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed))
        grad_out = torch.randn(4, 2, generator=torch.Generator().manual_seed(seed + 10))
        out, _ = server.forward((client, 1), h)
        assert torch.allclose(out, reference[1](reference[0](h)))
        grad_h, _ = server.backward((client, 1), grad_out, client)
        h_ref = h.clone().requires_grad_(True)
        every = torch.autograd.grad(reference[1](reference[0](h_ref)), [h_ref, *reference.parameters()], grad_out)
        assert torch.allclose(grad_h, every[0])
        grads = [g + e for g, e in zip(grads, every[1:])]
    server.step_gradient([3, 5], lr=0.2)
    for param, w0, g in zip(server.blocks.parameters(), w, grads):
        assert torch.allclose(param, w0 - 0.2 / 2 * g, atol=1e-6)


def test_training_through_the_remote_encoder_gives_the_local_gradients():
    """head -> RemoteEncoder -> tail backpropagates exactly as the uncut model does."""
    head, tail, encoder = nn.Linear(3, 2), nn.Linear(2, 4), tiny_encoder()
    remote = split.RemoteEncoder(split.EncoderServer(tiny_encoder()))
    remote.begin(client=0)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    tail(remote(head(x))).sum().backward()
    remote_grads = [p.grad.clone() for p in (*head.parameters(), *tail.parameters())]
    head.zero_grad(), tail.zero_grad()
    tail(encoder[1](encoder[0](head(x)))).sum().backward()
    for got, want in zip(remote_grads, [p.grad for p in (*head.parameters(), *tail.parameters())]):
        assert torch.allclose(got, want, atol=1e-6)
    assert remote.counters["bytes_up_activations"] == remote.counters["bytes_down_activations"] == 5 * 2 * 4
    assert remote.counters["bytes_up_gradients"] == remote.counters["bytes_down_gradients"] == 5 * 2 * 4


def test_server_lr_decay_schedule():
    config = build_config("fedv", [{"fedv": {"lr_server": 1e-6, "lr_decay": 0.5, "decay_every": 10}}])
    assert [server_lr(config.options, r) for r in (1, 10, 11, 21)] == [1e-6, 1e-6, 5e-7, 2.5e-7]


def test_heads_and_tails_are_averaged_unweighted_every_fedround_rounds():
    method = FedV(build_config("fedv", [{"fedv": {"fedround": 3}}]))
    state = GlobalState(params={"t": torch.tensor([0.0, 0.0])})
    results = [
        ClientUpdate(1, 10, {"t": torch.tensor([1.0, 2.0])}),
        ClientUpdate(2, 30, {"t": torch.tensor([3.0, 6.0])}),
    ]
    assert method.aggregate(2, state, results) is state and not method.resets_client_states(2)
    averaged = method.aggregate(3, state, results)
    assert torch.equal(averaged.params["t"], torch.tensor([2.0, 4.0]))  # 1/m, not N_i / N
    assert method.resets_client_states(3) and method.resets_client_states(6)


def run(method, rounds=3, backend="sequential", workers=0, **options):
    layers = [
        TINY,
        {"federation": {"rounds": rounds}, "resources": {"backend": backend, "workers": workers}, method: options},
    ]
    config = build_config(method, layers)
    with open_simulation(config) as (simulation, _, shards):
        reports = [simulation.run_round(r) for r in range(1, rounds + 1)]
        state = simulation.global_state()
        client_states = dict(simulation.clients) if backend == "sequential" else None
    return config, shards, reports, state, client_states


def test_clients_keep_their_own_head_and_tail_until_the_fedround_average(ray_session):
    _, _, reports, state, client_states = run("fedv", rounds=2, fedround=2)
    assert client_states == {}  # round 2 averaged: every client continues from the global head and tail
    _, _, reports, _, client_states = run("fedv", rounds=3, fedround=2)
    assert set(client_states) == set(reports[-1].sampled)  # round 3's clients trained their own copies


@pytest.mark.parametrize("method", ["fedv", "fedvz"])
def test_bytes_counted_match_the_tensors_sent(ray_session, method):
    """Per round: every step sends the smashed batch up and gets the encoder output down (activations), sends the
    output gradient and gets the input gradient (gradients); FedVZ's last step adds the batch up, two outputs down
    and one float64 up; heads and tails go down to clients without their own and up on fedround rounds."""
    config, shards, reports, state, _ = run(method, rounds=2, fedround=2)
    sizes, row = shards.train_sizes(), TOKENS * WIDTH * 4
    batch = config.train.batch_size
    params = sum(t.numel() * t.element_size() for t in state.params.values())
    for report in reports:
        rows = [int(sizes[c]) for c in report.sampled]
        m = report.metrics
        assert m["bytes_activations"] == m["bytes_gradients"] == 2 * sum(rows) * row
        last = [n - (train.steps_per_round(n, config.train) - 1) * batch for n in rows]
        assert m["bytes_spsa"] == (3 * sum(last) * row + 8 * len(rows) if method == "fedvz" else 0)
        up_params = params * len(rows) if report.round % 2 == 0 else 0
        down_params = params * len(rows) if report.round == 1 else 0  # round 2's clients hold their own copies
        assert m["bytes_params"] == up_params + down_params or report.round == 2
        assert m["bytes_up"] + m["bytes_down"] == pytest.approx(
            m["bytes_activations"] + m["bytes_gradients"] + m["bytes_spsa"] + m["bytes_params"]
        )
        assert m["lr_server"] == config.options.lr_server
        assert m["client_compute_s"] > 0 and m["server_compute_s"] > 0 and m["transfer_s"] >= 0


@pytest.mark.parametrize("method", ["fedv", "fedvz"])
def test_same_numbers_sequentially_and_on_ray_with_one_or_two_workers(ray_session, method):
    options = {"fedround": 2, "lr_server": 1e-2}  # a large step, so a wrong server update would show
    runs = [run(method, backend=b, workers=w, **options) for b, w in (("sequential", 0), ("ray", 1), ("ray", 2))]
    _, _, reference, state, clients = runs[0]
    assert any(
        not torch.equal(v, initial)
        for v, initial in zip(
            state.server.values(), run(method, rounds=1, **{**options, "lr_server": 0.0})[3].server.values()
        )
    )  # the encoder did move
    for _, _, reports, other, _ in runs[1:]:
        assert [r.metrics["global_acc"] for r in reports] == [r.metrics["global_acc"] for r in reference]
        assert [r.metrics["train_loss"] for r in reports] == [r.metrics["train_loss"] for r in reference]
        for key in (*state.params, *state.server):
            both = (state.params | state.server)[key], (other.params | other.server)[key]
            assert torch.equal(*both), key


def test_resume_from_a_snapshot_continues_exactly(ray_session):
    """The encoder travels in the checkpoint's server state: 2 rounds, restart, 1 more equals 3 straight."""
    _, _, _, straight, _ = run("fedvz", rounds=3, fedround=2, lr_server=1e-2)
    config, shards, _, state, client_states = run("fedvz", rounds=2, fedround=2, lr_server=1e-2)
    config, _, shards = prepared(build_config("fedvz", [TINY, {"fedvz": {"fedround": 2, "lr_server": 1e-2}}]), shards)
    resumed = make_simulation(config, shards, Checkpoint("untracked", 2, config.to_dict(), state, client_states, ""))
    resumed.run_round(3)
    final = resumed.global_state()
    stop(resumed, graceful=True)
    for key in (*straight.params, *straight.server):
        assert torch.equal((straight.params | straight.server)[key], (final.params | final.server)[key]), key
