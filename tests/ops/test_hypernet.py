"""pFedHN's hypernetwork gradient from a parameter delta, pFedPG's prompt generator, and the server optimisers,
against hand-computed values."""

import math

import pytest
import torch

from raysim.ops import hypernet as hn


def linear_generate(weights, v):
    return {"theta": weights["phi"] * v}


def test_delta_gradient_hand_computed():
    # h(v; phi) = phi v, phi = [0.5, -1], v = 1: theta = [0.5, -1]; the client's loss 0.5 ||theta - [1, 1]||^2, one
    # SGD step with lr 0.1 -> [0.55, -0.8]; dtheta = theta - theta~ = [-0.05, -0.2]
    # grad_phi = v dtheta = [-0.05, -0.2]; grad_v = phi . dtheta = 0.175; with a = 1: phi [0.55, -0.8], v 0.825
    weights, table = {"phi": torch.tensor([0.5, -1.0])}, torch.tensor([1.0])
    grads, rows = hn.delta_gradients(linear_generate, weights, table, {0: {"theta": torch.tensor([-0.05, -0.2])}})
    assert grads["phi"].tolist() == pytest.approx([-0.05, -0.2])
    assert rows.tolist() == pytest.approx([0.175])
    step = hn.sgd_momentum(weights["phi"], grads["phi"], torch.zeros(2), 1.0, 0.0, 0.0)[0]  # pFedHN's server step
    assert step.tolist() == pytest.approx([0.55, -0.8])
    assert hn.sgd_momentum(table, rows, torch.zeros(1), 1.0, 0.0, 0.0)[0].tolist() == pytest.approx([0.825])


def test_shared_weights_average_over_clients_and_each_row_gets_its_own():
    weights, table = {"phi": torch.tensor([1.0])}, torch.tensor([2.0, 3.0, 5.0])
    deltas = {0: {"theta": torch.tensor([1.0])}, 2: {"theta": torch.tensor([3.0])}}
    grads, rows = hn.delta_gradients(linear_generate, weights, table, deltas)
    assert grads["phi"].tolist() == pytest.approx([(2 * 1 + 5 * 3) / 2])
    assert rows.tolist() == pytest.approx([1.0, 0.0, 3.0])


def test_mlp_hypernet_shapes_and_output():
    targets = {"prompts.shallow": (1, 2, 3), "vit.head.bias": (4,)}
    weights = hn.mlp_hypernet(5, 7, 2, targets, torch.Generator().manual_seed(0))
    assert weights["body.0.weight"].shape == (7, 5) and weights["body.2.weight"].shape == (7, 7)
    assert weights["out.prompts.shallow.weight"].shape == (6, 7)
    out = hn.mlp_generate(weights, torch.ones(5), targets)
    assert {k: tuple(v.shape) for k, v in out.items()} == targets
    # all weights zero but the last body bias and the head bias: theta = head bias
    zeros = {k: torch.zeros_like(v) for k, v in weights.items()} | {"out.vit.head.bias.bias": torch.arange(4.0)}
    assert hn.mlp_generate(zeros, torch.ones(5), targets)["vit.head.bias"].tolist() == [0.0, 1.0, 2.0, 3.0]


def identity_generator(scale_qk: float = 1.0):
    eye = torch.eye(2)
    return {"base": eye.clone(), "w_q": scale_qk * eye, "w_k": scale_qk * eye, "w_v": eye.clone(), "w_o": eye.clone()}


def test_attention_prompt_hand_computed():
    # d = [2, 0], W = I: scores = [2, 0] / sqrt(2), attention [0.804430, 0.195570], added to each basis row
    prompt = hn.attention_prompt(identity_generator(), torch.tensor([2.0, 0.0]), heads=1)
    assert prompt.tolist() == [
        pytest.approx([1.804430, 0.195570], abs=1e-6),
        pytest.approx([0.804430, 1.195570], abs=1e-6),
    ]


def test_prompt_generator_step_from_a_delta_hand_computed():
    # W_q = W_k = 0: uniform attention, P = P_base + mean of its rows = [[1.5, 0.5], [0.5, 1.5]]; the client moved
    # its prompt by +0.1 I, so dP = P - P~ = -0.1 I: grad_base = dP + (1/2) sum_rows dP = [[-0.15, -0.05], [-0.05,
    # -0.15]]; SGD with lr 1 -> [[1.15, 0.05], [0.05, 1.15]]
    weights = identity_generator(0.0)
    assert hn.attention_prompt(weights, torch.tensor([2.0, 0.0]), 1).tolist() == [[1.5, 0.5], [0.5, 1.5]]

    def generate(w, d):
        return {"p": hn.attention_prompt(w, d, 1)}

    grads, _ = hn.delta_gradients(generate, weights, torch.tensor([[2.0, 0.0]]), {0: {"p": -0.1 * torch.eye(2)}})
    assert grads["base"].tolist() == [pytest.approx([-0.15, -0.05]), pytest.approx([-0.05, -0.15])]
    step = hn.sgd_momentum(weights["base"], grads["base"], torch.zeros(2, 2), 1.0, 0.0, 0.0)[0]
    assert step.tolist() == [pytest.approx([1.15, 0.05]), pytest.approx([0.05, 1.15])]


def test_multi_head_attention_splits_the_width():
    weights = {k: torch.eye(4) for k in ("w_q", "w_k", "w_v", "w_o")} | {"base": torch.eye(4)[:2]}
    prompt = hn.attention_prompt(weights, torch.tensor([1.0, 0.0, 0.0, 1.0]), heads=2)
    # head 1 (dims 0-1) sees scores [1, 0] / sqrt(2); head 2 (dims 2-3) sees [0, 0]: uniform over two zero rows
    a = 1 / (1 + math.exp(-1 / math.sqrt(2)))
    assert (prompt - weights["base"]).tolist() == [pytest.approx([a, 1 - a, 0.0, 0.0])] * 2


def test_server_optimisers_match_torch():
    p0, grads = torch.tensor([1.0, -2.0]), [torch.tensor([0.5, 0.1]), torch.tensor([-0.3, 0.2])]
    reference = torch.nn.Parameter(p0.clone())
    sgd = torch.optim.SGD([reference], lr=0.1, momentum=0.9, weight_decay=0.01)
    p, buf = p0.clone(), torch.zeros(2)
    for g in grads:
        reference.grad = g.clone()
        sgd.step()
        p, buf = hn.sgd_momentum(p, g, buf, 0.1, 0.9, 0.01)
    assert torch.allclose(p, reference.detach())
    reference = torch.nn.Parameter(p0.clone())
    opt = torch.optim.Adam([reference], lr=0.1)
    p, moments = p0.clone(), (torch.zeros(2), torch.zeros(2))
    for step, g in enumerate(grads, start=1):
        reference.grad = g.clone()
        opt.step()
        p, moments = hn.adam(p, g, moments, step, 0.1)
    assert torch.allclose(p, reference.detach())


def test_clip_by_norm_scales_all_together():
    clipped = hn.clip_by_norm([torch.tensor([3.0]), torch.tensor([4.0])], 1.0)
    assert [c.item() for c in clipped] == pytest.approx([0.6, 0.8], abs=1e-6)
