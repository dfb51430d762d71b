"""Inverting Gradients' loss and its gradient against values computed by hand, and iDLG's label recovery from a
one-sample SGD update read back into its gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raysim.attacks.inverting import InvertingSettings, attack_loss, cosine_distance, invert, total_variation
from raysim.attacks.labels import HEAD_BIAS, recovered_labels
from raysim.attacks.observed import observed_gradient
from raysim.config import build_config
from raysim.core.messages import Broadcast, ClientUpdate


def test_cosine_distance_over_tensors_taken_as_one_vector():
    a = [torch.tensor([1.0, 0.0]), torch.tensor([[2.0]])]
    b = [torch.tensor([0.0, 3.0]), torch.tensor([[4.0]])]
    # <a, b> = 8, |a| = sqrt(5), |b| = 5
    assert float(cosine_distance(a, b)) == pytest.approx(1 - 8 / (5 * np.sqrt(5)))
    assert float(cosine_distance(a, [2 * t for t in a])) == pytest.approx(0.0, abs=1e-7)


def test_total_variation_and_its_gradient_by_hand():
    x = torch.tensor([[[[0.0, 1.0], [3.0, 2.5]]]], requires_grad=True)
    tv = total_variation(x)
    # horizontal |1 - 0|, |2.5 - 3| -> mean 0.75; vertical |3 - 0|, |2.5 - 1| -> mean 2.25
    assert float(tv.detach()) == pytest.approx(3.0)
    (grad,) = torch.autograd.grad(tv, x)
    # d/dx of the means of |differences|: each difference's sign over 2, on both of its pixels
    expected = [[0.5 * (-1) + 0.5 * (-1), 0.5 * 1 + 0.5 * (-1)], [0.5 * 1 + 0.5 * 1, 0.5 * (-1) + 0.5 * 1]]
    assert grad[0, 0].flatten().tolist() == pytest.approx([v for row in expected for v in row])


class Linear(torch.nn.Module):
    """A linear classifier of 1 x 2 x 2 images, named like the ViT's head."""

    input_spec = (2, (0.0,), (1.0,))

    def __init__(self, classes: int = 3, dtype=torch.float32):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.vit = torch.nn.Module()
        self.vit.head = torch.nn.Linear(4, classes, dtype=dtype)
        with torch.no_grad():
            self.vit.head.weight.copy_(torch.randn(classes, 4, generator=generator, dtype=dtype))
            self.vit.head.bias.copy_(torch.randn(classes, generator=generator, dtype=dtype))

    def forward(self, x):
        return self.vit.head(x.flatten(1))


def test_the_attack_loss_is_the_cosine_of_the_cross_entropy_gradients_by_hand():
    model = Linear()
    x = torch.tensor([[[[0.5, -1.0], [2.0, 0.25]]]])
    observed = {"vit.head.weight": torch.ones(3, 4), HEAD_BIAS: torch.tensor([1.0, -2.0, 0.5])}
    w, b = model.vit.head.weight.detach().numpy(), model.vit.head.bias.detach().numpy()
    flat = x.flatten().numpy()
    p = np.exp(w @ flat + b) / np.exp(w @ flat + b).sum()
    residual = p - np.eye(3)[1]  # softmax minus the one-hot label: d CE / d logits
    dummy = np.concatenate([np.outer(residual, flat).ravel(), residual])
    target = np.concatenate([np.ones(12), [1.0, -2.0, 0.5]])
    expected = 1 - dummy @ target / (np.linalg.norm(dummy) * np.linalg.norm(target))
    loss = attack_loss(model, observed, x, torch.tensor([1]), tv=0.0)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


def test_the_attack_losss_gradient_in_the_input_matches_finite_differences():
    model = Linear(dtype=torch.float64)
    observed = {
        "vit.head.weight": torch.randn(3, 4, dtype=torch.float64),
        HEAD_BIAS: torch.randn(3, dtype=torch.float64),
    }
    x = torch.tensor([[[[0.5, -1.0], [2.0, 0.25]]]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: attack_loss(model, observed, v, torch.tensor([2]), tv=0.1), (x,))


def one_sgd_step(model, x, labels, lr, decay):
    """The tensors one SGD step (with momentum, as the clients' optimiser) sends, and the true gradient."""
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=decay)
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    true = dict(zip(start, torch.autograd.grad(loss, list(model.parameters()))))
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    sent = {name: p.detach().clone() for name, p in model.named_parameters()}
    return start, sent, true


@pytest.mark.parametrize("label", [0, 4, 6])
def test_idlg_recovers_the_label_of_a_one_sample_update(label):
    config = build_config("fedavg", [{"train": {"optimizer": "sgd", "lr": 0.05, "weight_decay": 0.01}}])
    model = Linear(classes=7)
    x = torch.randn(1, 1, 2, 2, generator=torch.Generator().manual_seed(label))
    start, sent, true = one_sgd_step(model, x, torch.tensor([label]), lr=0.05, decay=0.01)
    update = ClientUpdate(0, 1, sent, metrics={"steps": 1})
    gradient = observed_gradient(update, Broadcast(start), config)
    for name, tensor in true.items():
        assert torch.allclose(gradient[name], tensor, atol=1e-4), name
    assert recovered_labels(gradient, 1).tolist() == [label]


def test_a_batch_of_distinct_labels_is_recovered_as_a_set():
    config = build_config("fedavg", [{"train": {"optimizer": "sgd", "lr": 0.1, "weight_decay": 0.0}}])
    model = Linear(classes=7)
    x = torch.randn(3, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    start, sent, _ = one_sgd_step(model, x, torch.tensor([5, 1, 3]), lr=0.1, decay=0.0)
    gradient = observed_gradient(ClientUpdate(0, 3, sent, metrics={"steps": 1}), Broadcast(start), config)
    assert recovered_labels(gradient, 3).tolist() == [1, 3, 5]


@pytest.mark.parametrize("labels", [[3, 3], [0, 0, 1, 2, 3, 4, 5, 6]], ids=["repeated", "most classes held"])
def test_a_batchs_repeated_labels_are_counted(labels):
    """One step over rows that repeat a label, or hold 7 of 10 classes (where the median class is a held one): the
    bias gradient mean_i (p_i - onehot(y_i)) gives every row's label back, repeats included."""
    y = torch.tensor(labels)
    p = torch.softmax(0.3 * torch.randn(len(y), 10, generator=torch.Generator().manual_seed(0)), 1)
    gradient = {HEAD_BIAS: (p - torch.nn.functional.one_hot(y, 10).float()).mean(0)}
    assert recovered_labels(gradient, len(y)).tolist() == labels


def test_inverting_a_linear_classifier_finds_the_input():
    """The weight gradient of a linear layer is (p - y) x^T: its direction holds x, which the attack recovers."""
    model = Linear(classes=5)
    x = torch.tensor([[[[0.9, 0.1], [0.4, 0.7]]]])
    _, _, true = one_sgd_step(model, x, torch.tensor([3]), lr=0.1, decay=0.0)
    fresh = Linear(classes=5)  # the broadcast model: the one the step started from
    box = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    found = invert(fresh, true, torch.tensor([3]), box, InvertingSettings(iterations=400, lr=0.05, tv=0.0))
    assert torch.allclose(found.inputs, x, atol=0.02)
    assert found.loss < 1e-3


def test_the_float64_refinement_finishes_a_search_cut_short_and_leaves_the_model_as_it_was():
    model = Linear(classes=5)
    x = torch.tensor([[[[0.9, 0.1], [0.4, 0.7]]]])
    _, _, true = one_sgd_step(model, x, torch.tensor([3]), lr=0.1, decay=0.0)
    box = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    fresh = Linear(classes=5)
    before = {name: p.detach().clone() for name, p in fresh.named_parameters()}
    short = InvertingSettings(iterations=40, lr=0.05, tv=0.01)
    searched = invert(fresh, true, torch.tensor([3]), box, short)
    refined = invert(fresh, true, torch.tensor([3]), box, InvertingSettings(40, 0.05, 0.01, refine=50))
    assert (searched.inputs - x).abs().max() > 1e-3  # Adam's 40 signed steps end short of the input
    assert (refined.inputs - x).abs().max() < 1e-5  # L-BFGS on the cosine alone, in float64, ends on it
    assert refined.loss < 1e-10 and refined.inputs.dtype == torch.float32
    for name, p in fresh.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p.detach(), before[name]), name


def test_the_commands_defaults_are_the_attacks_defaults():
    """``raysim attack inverting`` (whose module imports no torch) states the defaults ``InvertingSettings`` has."""
    from raysim.attacks.cli import inverting

    given = {option.name: option.default for option in inverting.params}
    assert InvertingSettings(*(given[name] for name in ("iterations", "lr", "tv", "seed", "refine"))) == (
        InvertingSettings()
    )
