"""SAM's perturbed step (FedSAM, HarmoFL's weight perturbation) against hand-computed values."""

import pytest
import torch

from raysim.ops.sam import ascent, sam_step


def quadratic(w: torch.Tensor) -> torch.Tensor:
    return 0.5 * (w[0] ** 2 + 4 * w[1] ** 2)


def test_sam_step_hand_computed():
    # g = [1, 8], ||g|| = 8.062258, eps = 0.05 g / ||g|| = [0.006202, 0.049614]; g' = grad at w + eps =
    # [1.006202, 8.198456]; SGD from w = [1, 2] with lr 0.1 -> [0.899380, 1.180154]
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    loss = sam_step(optimizer, [w], lambda: quadratic(w), radius=0.05)
    assert loss.item() == pytest.approx(8.5)
    assert w.tolist() == pytest.approx([0.899380, 1.180154], abs=1e-6)


def test_ascent_normalises_over_all_tensors_together():
    eps = ascent([torch.tensor([3.0]), torch.tensor([0.0, 4.0])], radius=1.0)
    assert [e.tolist() for e in eps] == [pytest.approx([0.6]), pytest.approx([0.0, 0.8])]


def test_radius_zero_is_the_base_step_and_frozen_tensors_are_left_alone():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    frozen = torch.tensor([5.0], requires_grad=True)  # no gradient reaches it
    sam_step(torch.optim.SGD([w, frozen], lr=0.1), [w, frozen], lambda: quadratic(w), radius=0.0)
    assert w.tolist() == pytest.approx([0.9, 1.2]) and frozen.tolist() == [5.0]
