"""Fairness aggregation formulas (FedGR, q-FFL, AFL, TERM) against hand-computed values on tiny tensors."""

from __future__ import annotations

import math

import pytest
import torch

from raysim.ops import reweighting as fairness


def test_beta_schedule_is_zero_in_round_one_and_approaches_delta():
    assert fairness.fedgr_beta(1, 0.5, 0.5) == 0.0
    assert fairness.fedgr_beta(2, 0.5, 0.5) == pytest.approx(0.25)
    assert fairness.fedgr_beta(3, 0.5, 0.5) == pytest.approx(0.375)
    assert fairness.fedgr_beta(60, 0.5, 0.5) == pytest.approx(0.5)
    assert fairness.fedgr_beta(2, 0.4, 0.8) == pytest.approx(0.08)  # 0.4 (1 - 0.8); delta, gamma swapped: 0.48
    assert fairness.fedgr_beta(3, 0.4, 0.8) == pytest.approx(0.144)  # 0.4 (1 - 0.64)


def test_fedgr_paper_weights_hand_computed():
    # clusters {0: losses 1, 2 -> mean 1.5}, {1: loss 4}; beta 0.5, q 1: L'^2 = L * Lbar = 1.5, 3, 16
    # omega = 1/4, 1/4, 2/4 -> 0.375, 0.75, 8 -> normalised by 9.125
    w = fairness.fedgr_weights([1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1], beta=0.5, q=1.0)
    assert w.tolist() == pytest.approx([0.375 / 9.125, 0.75 / 9.125, 8 / 9.125])
    # Eq. 3's Lbar is the plain mean over the cluster's clients, not weighted by their data: with sizes 1, 3, 2 the
    # cluster {0, 1} still has Lbar 1.5 (a data-weighted mean would be 1.75); omega = 1/6, 3/6, 2/6 -> 0.25, 1.5,
    # 16/3 -> normalised by 85/12
    w = fairness.fedgr_weights([1.0, 2.0, 4.0], [1, 3, 2], [0, 0, 1], beta=0.5, q=1.0)
    assert w.tolist() == pytest.approx([3 / 85, 18 / 85, 64 / 85])


def test_fedgr_with_beta_zero_is_individual_q_ffl_reweighting():
    w = fairness.fedgr_weights([1.0, 2.0], [1, 1], [0, 0], beta=0.0, q=1.0)
    assert w.tolist() == pytest.approx([1 / 5, 4 / 5])  # omega * L^2
    w = fairness.fedgr_weights([1.0, 4.0], [1, 1], [0, 1], beta=0.0, q=2.0)
    assert w.tolist() == pytest.approx([1 / 65, 64 / 65])  # omega * L^(q+1) = L^3


def test_fedgr_code_variant_quantises_losses_and_mixes_powers():
    # 100 / int(100 / L): 0.3 -> 100/333, 3 -> 100/33, 4 -> 4; a = 0.5 + 0.5 * 0.9 = 0.95 in round 1
    # cluster 0 mean is data-weighted: (100/333 * 1 + 100/33 * 3) / 4
    w = fairness.fedgr_weights([0.3, 3.0, 4.0], [1, 3, 2], [0, 0, 1], beta=0.5, q=1.0, variant="code", round=1)
    l0, l1, l2 = 100 / 333, 100 / 33, 4.0
    m0 = (l0 * 1 + l1 * 3) / 4
    raw = [1 / 6 * (l0**0.95 * m0**0.05) ** 2, 3 / 6 * (l1**0.95 * m0**0.05) ** 2, 2 / 6 * l2**2]
    assert w.tolist() == pytest.approx([r / sum(raw) for r in raw])


def test_tilted_weights_hand_computed():
    assert fairness.tilted_weights([0.0, math.log(2.0)], [1, 1], tilt=1.0).tolist() == pytest.approx([1 / 3, 2 / 3])
    assert fairness.tilted_weights([5.0, 1.0], [1, 3], tilt=0.0).tolist() == pytest.approx([0.25, 0.75])
    # FedGCR's comparison's tilt 0.01: exp(0.01 * 100 ln 2) = 2, times omega = 2/3, 1/3 -> equal weights
    assert fairness.tilted_weights([0.0, 100 * math.log(2.0)], [2, 1], tilt=0.01).tolist() == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize(
    "v, expected",
    [
        ([0.5, 0.5], [0.5, 0.5]),
        ([1.2, 0.0], [1.0, 0.0]),
        ([0.6, 0.6, 0.0], [0.5, 0.5, 0.0]),
        ([1.0, 2.0, 3.0], [0.0, 0.0, 1.0]),
    ],
)
def test_simplex_projection_hand_computed(v, expected):
    assert fairness.project_simplex(torch.tensor(v, dtype=torch.float64)).tolist() == pytest.approx(expected)


def test_afl_lambda_ascends_towards_the_sampled_high_loss_client():
    lam = fairness.afl_lambda_step(torch.tensor([0.5, 0.5], dtype=torch.float64), [1], [1.0], lr=0.1)
    assert lam.tolist() == pytest.approx([0.45, 0.55])  # proj([0.5, 0.6]) subtracts 0.05 from each
    # one of two clients sampled: M / m = 2 doubles the step -> proj([0.5, 0.7]) = [0.4, 0.6]
    lam = fairness.afl_lambda_step(torch.tensor([0.5, 0.5], dtype=torch.float64), [1], [1.0], lr=0.1, scale=2.0)
    assert lam.tolist() == pytest.approx([0.4, 0.6])


@pytest.mark.parametrize(
    "losses, sizes, lr, expected",
    [
        ([2.0, 0.0], [1, 3], 0.1, [0.35, 0.65]),  # omega + lr F = [0.45, 0.75], sum 1.2: subtract 0.1 each
        ([10.0, 0.0], [1, 1], 0.1, [1.0, 0.0]),  # [1.5, 0.5]: subtracting 0.5 clips the second to 0
        ([7.0, 1.0], [1, 3], 0.0, [0.25, 0.75]),  # lr 0: the data shares
    ],
)
def test_afl_one_step_weights_project_shares_plus_losses_hand_computed(losses, sizes, lr, expected):
    assert fairness.afl_one_step_weights(losses, sizes, lr).tolist() == pytest.approx(expected)


def qffl_from_zero(sizes: list[int], lipschitz: float) -> float:
    """q-FFL's step (q = 1) from w = 0 with clients at -1 and 1 whose losses are 1 and 3."""
    clients = [{"w": torch.tensor([-1.0])}, {"w": torch.tensor([1.0])}]
    return fairness.qffl_step({"w": torch.zeros(1)}, clients, [1.0, 3.0], sizes, q=1.0, lipschitz=lipschitz)["w"].item()


def test_qffl_step_hand_computed():
    # L = 1: Delta w = [1, -1], Delta = [1, -3], h = [1 + 1, 1 + 3] -> w - (1 - 3) / 6 = 1/3 (towards the high loss)
    assert qffl_from_zero([5, 5], 1.0) == pytest.approx(1 / 3)
    # data shares 1/4, 3/4: w - (1/4 * 1 - 3/4 * 3) / (1/4 * 2 + 3/4 * 4) = 2 / 3.5
    assert qffl_from_zero([1, 3], 1.0) == pytest.approx(2 / 3.5)
    # L = 2 (L = 1/lr in runs): Delta w = [2, -2], Delta = [2, -6], h = [||Delta w||^2 + 2 * 1, 4 + 2 * 3] = [6, 10]
    # -> w - (2 - 6) / (6 + 10) = 1/4 (a step ignoring L gives L = 1's 1/3)
    assert qffl_from_zero([5, 5], 2.0) == pytest.approx(1 / 4)


def test_qffl_with_q_zero_is_fedavg():
    updates = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, -2.0])}]
    out = fairness.qffl_step({"w": torch.tensor([9.0, 9.0])}, updates, [0.7, 5.0], [3, 1], q=0.0, lipschitz=50.0)
    assert out["w"].tolist() == pytest.approx([1.5, 1.0])  # 3/4 and 1/4 of the two models


def test_zero_losses_keep_the_weights_finite_and_bad_weights_are_refused():
    from raysim.ops.aggregate import normalised_weights

    w = fairness.fedgr_weights([0.0, 0.0], [1, 2], [0, 0], beta=0.25, q=1.0)
    assert w.tolist() == pytest.approx([1 / 3, 2 / 3])  # the loss floor leaves the data shares
    with pytest.raises(ValueError, match="must be finite"):
        normalised_weights([float("nan"), 1.0])
