"""FedMix's approximated mixup loss against hand-computed values (f = identity: the logits are the input)."""

import pytest
import torch
from torch.nn import functional as F

from raysim.ops.mixup import fedmix_loss

X_MEAN, Y_MEAN = torch.tensor([0.5, -0.5]), torch.tensor([0.3, 0.7])


def test_one_sample_hand_computed_and_close_to_the_exact_mixup():
    # s = 0.9 x = [0.9, 1.8]; l1 = 0.9 CE(s, 0) = 1.117038; l2 = 0.1 CE(s, y_mean) = 0.061115;
    # d l1 / d s = 0.9 (softmax(s) - e_0) = [-0.639855, 0.639855]; l3 = 0.1 <., x_mean> = -0.063985
    loss = fedmix_loss(lambda s: s, torch.tensor([[1.0, 2.0]]), torch.tensor([0]), X_MEAN, Y_MEAN, lam=0.1)
    assert loss.item() == pytest.approx(1.114168, abs=1e-6)
    # the exact mixup: CE at 0.9 x + 0.1 x_mean = [0.95, 1.75] against 0.9 e_0 + 0.1 y_mean = [0.93, 0.07]
    assert exact_mixup(0.1) == pytest.approx(1.115101, abs=1e-6)
    assert abs(loss.item() - exact_mixup(0.1)) < 1e-3


def exact_mixup(lam: float) -> float:
    """CE(f(mixed x), mixed y) for the one sample [1, 2] of class 0, f = identity."""
    x = (1 - lam) * torch.tensor([1.0, 2.0]) + lam * X_MEAN
    y = (1 - lam) * torch.tensor([1.0, 0.0]) + lam * Y_MEAN
    return -(y * F.log_softmax(x, dim=0)).sum().item()


def test_the_expansion_error_is_second_order_in_lam():
    # halving lam quarters the gap to the exact mixup: 9.3e-4 at 0.1, 2.0e-4 at 0.05, 4.6e-5 at 0.025
    def gap(lam):
        approx = fedmix_loss(lambda s: s, torch.tensor([[1.0, 2.0]]), torch.tensor([0]), X_MEAN, Y_MEAN, lam=lam)
        return abs(approx.item() - exact_mixup(lam))

    assert gap(0.05) < 0.3 * gap(0.1) and gap(0.025) < 0.3 * gap(0.05)


def test_the_taylor_term_is_per_sample_not_divided_by_the_batch():
    # B = 2: l1 = 0.712039, l2 = 0.061115, l3 = -0.018985 (the authors' batch-mean gradient gives -0.009493)
    x, y = torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.tensor([0, 1])
    assert fedmix_loss(lambda s: s, x, y, X_MEAN, Y_MEAN, lam=0.1).item() == pytest.approx(0.754168, abs=1e-6)


def test_the_loss_is_differentiable_in_the_model_through_the_input_gradient():
    w = torch.eye(2, requires_grad=True)
    loss = fedmix_loss(lambda s: s @ w, torch.tensor([[1.0, 2.0]]), torch.tensor([0]), X_MEAN, Y_MEAN, lam=0.1)
    (grad,) = torch.autograd.grad(loss, w)
    numeric = torch.zeros(2, 2)
    for i in range(2):
        for j in range(2):
            bump = torch.zeros(2, 2)
            bump[i, j] = 1e-3
            up = fedmix_loss(
                lambda s, b=bump: s @ (w + b), torch.tensor([[1.0, 2.0]]), torch.tensor([0]), X_MEAN, Y_MEAN, 0.1
            )
            down = fedmix_loss(
                lambda s, b=bump: s @ (w - b), torch.tensor([[1.0, 2.0]]), torch.tensor([0]), X_MEAN, Y_MEAN, 0.1
            )
            numeric[i, j] = (up - down).item() / 2e-3
    assert torch.allclose(grad, numeric, atol=1e-3)
