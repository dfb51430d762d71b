"""Offline LiRA's arithmetic (Carlini et al., S&P 2022) against hand-computed values, and a constructed case where
its per-row calibration finds the members a loss threshold cannot."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raysim.attacks.lira import logit_confidence, offline_scores
from raysim.attacks.membership import membership_roc


def test_the_logit_confidence_is_log_odds_of_the_true_label():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, -1.0]], dtype=torch.float64)
    phi = logit_confidence(logits, torch.tensor([0, 2]))
    # row 0: p = e^2 / (e^2 + 2), p / (1 - p) = e^2 / 2; row 1: p / (1 - p) = e^-1 / (1 + e)
    assert phi.tolist() == pytest.approx([2.0 - math.log(2.0), -1.0 - math.log(1.0 + math.e)])


def test_the_logit_confidence_stays_finite_where_the_probability_rounds_to_one():
    phi = logit_confidence(torch.tensor([[60.0, 0.0]]), torch.tensor([0]))
    assert torch.isfinite(phi).all() and phi.item() == pytest.approx(60.0)


def test_offline_scores_are_z_scores_against_each_rows_out_mean_with_one_variance():
    target = np.array([3.0, 1.0])
    shadows = np.array([[1.0, 0.0], [3.0, 2.0]])  # row means 2 and 1; every OUT value's std: std(1, 0, 3, 2)
    sigma = math.sqrt(1.25)
    assert offline_scores(target, shadows).tolist() == pytest.approx([1.0 / sigma, 0.0])


def test_offline_scores_refuse_shadows_of_other_rows():
    with pytest.raises(ValueError, match=r"shadows must be \[K >= 1, 2\]"):
        offline_scores(np.zeros(2), np.zeros((3, 4)))


def test_calibration_finds_members_among_rows_of_very_different_difficulty():
    """Members sit 1 above their row's OUT mean and non-members at it, but the rows' difficulties spread over 20: a
    threshold on the confidence alone is near chance, LiRA's z-score separates them exactly."""
    difficulty = np.random.default_rng(0).uniform(-10.0, 10.0, 400)
    shadows = difficulty + np.array([[-0.1], [0.1]])
    target = difficulty + np.repeat([1.0, 0.0], 200)
    raw = membership_roc(target[:200], target[200:])
    calibrated = offline_scores(target, shadows)
    lira = membership_roc(calibrated[:200], calibrated[200:])
    assert abs(raw.auc - 0.5) < 0.1 and raw.tpr_at_low_fpr < 0.1
    assert (lira.auc, lira.tpr_at_low_fpr) == (1.0, 1.0)
