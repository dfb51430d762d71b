"""FedV/FedVZ (seed 001): the SPSA estimator, the server's steps, the cut's autograd, the heads' and tails' random
start and t = 0 averaging schedule, bytes, determinism."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from raysim.algorithms import _split as split
from raysim.algorithms.fedv.method import FedV, client_init_seed, server_lr
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core import training as train
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.engine.driver import make_simulation, stop
from raysim.models.backbones import build_backbone
from raysim.models.factory import build_model
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


def test_heads_and_tails_are_averaged_unweighted_at_t_0_and_every_fedround_rounds_after():
    """Algorithm 1 line 20, t % fedround = 0 with t = round - 1: with fedround 3, after rounds 1, 4 and 7 of 8."""
    method = FedV(build_config("fedv", [{"fedv": {"fedround": 3}}]))
    state = GlobalState(params={"t": torch.tensor([0.0, 0.0])})
    results = [
        ClientUpdate(1, 10, {"t": torch.tensor([1.0, 2.0])}),
        ClientUpdate(2, 30, {"t": torch.tensor([3.0, 6.0])}),
    ]
    averaging = [r for r in range(1, 9) if method.aggregate(r, state, results) is not state]
    assert averaging == [1, 4, 7] == [r for r in range(1, 9) if method.resets_client_states(r)]
    assert torch.equal(method.aggregate(1, state, results).params["t"], torch.tensor([2.0, 4.0]))  # 1/m, not N_i / N


def pretrained_stand_in():
    """The nano backbone with a 10-class classifier and every weight 7.0, standing in for pretrained weights."""
    vit = build_backbone("raysim_vit_nano_p4_16")
    vit.reset_classifier(10)
    with torch.no_grad():
        for p in vit.parameters():
            p.fill_(7.0)
    return vit


def test_a_random_head_and_tail_is_timms_init_of_the_embedding_final_norm_and_classifier():
    vit = pretrained_stand_in()
    drawn = split.random_head_and_tail(vit, seed=5)
    assert set(drawn) == {
        "vit.pos_embed",
        "vit.cls_token",
        "vit.patch_embed.proj.weight",
        "vit.patch_embed.proj.bias",
        "vit.norm.weight",
        "vit.norm.bias",
        "vit.head.weight",
        "vit.head.bias",
    }  # the blocks keep their (pretrained) weights
    assert all(torch.equal(p, torch.full_like(p, 7.0)) for p in vit.parameters())  # vit itself untouched
    assert torch.equal(drawn["vit.norm.weight"], torch.ones(64)) and torch.equal(
        drawn["vit.norm.bias"], torch.zeros(64)
    )
    assert torch.equal(drawn["vit.head.bias"], torch.zeros(10))
    # truncated normals with std 0.02 (640 and 17 * 64 draws) and the class token's N(0, 1e-6) (64 draws)
    assert drawn["vit.head.weight"].std().item() == pytest.approx(0.02, rel=0.15)
    assert drawn["vit.pos_embed"].std().item() == pytest.approx(0.02, rel=0.15)
    assert drawn["vit.cls_token"].std().item() == pytest.approx(1e-6, rel=0.4)
    # the patch embedding's Conv2d.reset_parameters: uniform within 1 / sqrt(fan_in), fan_in = 3 * 4 * 4 = 48
    bound = 1 / math.sqrt(48)
    for name in ("vit.patch_embed.proj.weight", "vit.patch_embed.proj.bias"):
        assert 0.8 * bound < drawn[name].abs().max().item() <= bound
    again, other = split.random_head_and_tail(vit, seed=5), split.random_head_and_tail(vit, seed=6)
    assert all(torch.equal(drawn[k], again[k]) for k in drawn)  # deterministic per seed
    assert all(not torch.equal(drawn[k], other[k]) for k in drawn if drawn[k].std() > 0)


def test_with_client_init_random_each_round_1_client_draws_its_own_head_and_tail_from_the_run_seed():
    config = build_config("fedv", [TINY])
    method, vit = FedV(config), pretrained_stand_in()

    def own(round, client, client_state=None, method=method, config=config):
        ctx = SimpleNamespace(round=round, client_id=client, config=config, model=SimpleNamespace(vit=vit))
        return method.own_head_and_tail(ctx, client_state)

    first, second = own(1, 0), own(1, 1)
    assert all(
        torch.equal(first[k], v) for k, v in split.random_head_and_tail(vit, client_init_seed(config, 0)).items()
    )
    assert all(torch.equal(first[k], v) for k, v in own(1, 0).items())
    assert not torch.equal(first["vit.head.weight"], second["vit.head.weight"])  # per client
    reseeded = build_config("fedv", [TINY, {"federation": {"seed": 2}}])
    assert not torch.equal(first["vit.head.weight"], own(1, 0, config=reseeded)["vit.head.weight"])
    # after the t = 0 average, a client without its own starts from the average; one with its own keeps it
    assert own(2, 0) == {} and own(1, 0, client_state={}) == {}
    pretrained = build_config("fedv", [TINY, {"fedv": {"client_init": "pretrained"}}])
    assert own(1, 0, method=FedV(pretrained)) == {}


def test_the_global_head_and_tail_are_a_draw_from_the_init_generator_and_the_encoder_as_built():
    """With client_init=random the global head and tail (what a client without its own would start from) are a draw
    seeded from init_global's generator; everything else is the built model's, as with client_init=pretrained."""
    config = build_config("fedv", [TINY])
    model = build_model(config, FedV(config), num_classes=10)
    state = FedV(config).init_global(model, torch.Generator().manual_seed(0))
    pretrained = build_config("fedv", [TINY, {"fedv": {"client_init": "pretrained"}}])
    built = FedV(pretrained).init_global(model, torch.Generator().manual_seed(0))
    seed = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(0)))
    expected = {**built.params, **split.random_head_and_tail(model.vit, seed)}
    assert set(state.params) == set(expected) and all(torch.equal(state.params[k], expected[k]) for k in expected)
    assert all(torch.equal(state.server[k], built.server[k]) for k in built.server) and set(state.server) == set(
        built.server
    )
    assert not torch.equal(state.params["vit.patch_embed.proj.weight"], built.params["vit.patch_embed.proj.weight"])


def test_an_unknown_client_init_names_the_valid_ones():
    with pytest.raises(ConfigError, match="^fedv.client_init='zeros' is not one of random, pretrained"):
        build_config("fedv", [{"fedv": {"client_init": "zeros"}}])


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
    _, _, reports, state, client_states = run("fedv", rounds=3, fedround=2)
    assert client_states == {}  # round 3 (t = 2) averaged: every client continues from the global head and tail
    _, _, reports, _, client_states = run("fedv", rounds=2, fedround=2)
    assert set(client_states) == set(reports[-1].sampled)  # round 2's clients trained their own copies


@pytest.mark.parametrize("method", ["fedv", "fedvz"])
def test_bytes_counted_match_the_tensors_sent(ray_session, method):
    """Per round: every step sends the smashed batch up and gets the encoder output down (activations), sends the
    output gradient and gets the input gradient (gradients); FedVZ's last step adds two outputs down and one
    float64 up; heads and tails go up on averaging rounds (1 and 3) and down to clients without their own,
    except in round 1, where each client draws its own. FedVZ's last step sends its batch up once: the server keeps
    it for the two perturbed passes."""
    config, shards, reports, state, _ = run(method, rounds=2, fedround=2)
    sizes, row = shards.train_sizes(), TOKENS * WIDTH * 4
    batch = config.train.batch_size
    params = sum(t.numel() * t.element_size() for t in state.params.values())
    for report in reports:
        rows = [int(sizes[c]) for c in report.sampled]
        m = report.metrics
        assert m["bytes_activations"] == m["bytes_gradients"] == 2 * sum(rows) * row
        last = [n - (train.steps_per_round(n, config.train) - 1) * batch for n in rows]
        assert m["bytes_spsa"] == (2 * sum(last) * row + 8 * len(rows) if method == "fedvz" else 0)
        up_params = params * len(rows) if report.round == 1 else 0
        down_params = params * len(rows) if report.round == 2 else 0  # the average after round 1
        assert m["bytes_params"] == up_params + down_params
        # each way: one activation and one gradient per row; FedVZ's scalar up, its two outputs down
        each_way, spsa_batch = sum(rows) * row, sum(last) * row
        spsa_up, spsa_down = (8 * len(rows), 2 * spsa_batch) if method == "fedvz" else (0, 0)
        assert m["bytes_up"] == 2 * each_way + spsa_up + up_params
        assert m["bytes_down"] == 2 * each_way + spsa_down + down_params
        assert m["lr_server"] == config.options.lr_server
        assert m["client_compute_s"] > 0 and m["server_compute_s"] > 0


@pytest.mark.parametrize("method", ["fedv", "fedvz"])
def test_same_numbers_sequentially_and_on_ray_with_two_workers(ray_session, method):
    """Two workers call the server actor concurrently (one worker is the simpler case of the same path)."""
    options = {"fedround": 2, "lr_server": 1e-2}  # a large step, so a wrong server update would show
    runs = [run(method, backend=b, workers=w, **options) for b, w in (("sequential", 0), ("ray", 2))]
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
