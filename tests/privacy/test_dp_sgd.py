"""Record-level DP-SGD's step on a tiny model, against a step computed by hand, and its batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raysim.privacy.dp_sgd import DPSGD


def squared_error(w):
    return lambda x, y, rows: ((x @ w - y) ** 2).mean()


def test_each_rows_gradient_is_clipped_then_averaged_over_the_batch():
    w = torch.zeros(2, requires_grad=True)
    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([3.0, 0.25])
    # per-row gradients at w = 0: -2 y x = (-6, 0), norm 6, clipped to (-1, 0); and (0, -0.5), kept
    loss = DPSGD(0.0, 1.0, client_seed=7).step(
        torch.optim.SGD([w], lr=1.0), [w], squared_error(w), x, y, np.array([0, 1])
    )
    assert w.grad.tolist() == pytest.approx([-0.5, -0.25])
    assert w.tolist() == pytest.approx([0.5, 0.25])
    assert loss.item() == pytest.approx((9 + 0.0625) / 2)


def test_the_noise_on_the_sum_has_standard_deviation_z_c_before_the_division_by_the_batch():
    w = torch.zeros(100_000, requires_grad=True)
    x, y = torch.zeros(4, 100_000), torch.zeros(4)  # zero gradients: the step's gradient is the noise over B
    private = DPSGD(1.5, 2.0, client_seed=3)
    private.step(torch.optim.SGD([w], lr=0.0), [w], lambda x, y, rows: (x @ w - y).square().mean(), x, y, np.arange(4))
    assert (w.grad * 4).std().item() == pytest.approx(1.5 * 2.0, rel=0.01)
    again = torch.zeros(100_000, requires_grad=True)
    DPSGD(1.5, 2.0, client_seed=3).step(
        torch.optim.SGD([again], lr=0.0),
        [again],
        lambda x, y, rows: (x @ again - y).square().mean(),
        x,
        y,
        np.arange(4),
    )
    assert torch.equal(w.grad, again.grad)  # the client's seed fixes its noise: every backend, every resume


def test_batches_are_b_distinct_rows_drawn_anew_every_step():
    plan = DPSGD.plan(5, 2, 2, torch.Generator().manual_seed(0))
    assert [len(epoch) for epoch in plan] == [3, 3]
    steps = [rows for epoch in plan for rows in epoch]
    assert all(len(rows) == 2 and len(set(rows.tolist())) == 2 and rows.max() < 5 for rows in steps)
    assert len({tuple(rows.tolist()) for rows in steps}) > 1
    assert [len(rows) for rows in DPSGD.plan(3, 8, 1, torch.Generator())[0]] == [3]  # n < B: every row, once
