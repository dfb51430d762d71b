"""FedEM's E-step responsibilities, M-step weights and mixture prediction against hand-computed values."""

import math

import pytest
import torch

from raysim.ops.mixture import mixture_log_probs, mixture_weights, responsibilities


def test_e_and_m_step_hand_computed():
    losses = torch.tensor([[0.1, 2.0], [1.0, 0.5]])  # [K = 2 components, 2 samples]
    q = responsibilities(torch.tensor([0.5, 0.5]), losses)
    # sample 1: e^-0.1 / (e^-0.1 + e^-1) = 0.710949; sample 2: e^-2 / (e^-2 + e^-0.5) = 0.182426
    assert q.tolist() == [pytest.approx([0.710949, 0.289050], abs=1e-6), pytest.approx([0.182426, 0.817574], abs=1e-6)]
    assert mixture_weights(q).tolist() == pytest.approx([0.446687, 0.553312], abs=1e-6)


def test_the_prior_weights_enter_the_e_step():
    q = responsibilities(torch.tensor([0.9, 0.1]), torch.zeros(2, 1))  # equal losses: q = pi
    assert q.tolist() == [pytest.approx([0.9, 0.1])]


def test_mixture_prediction_is_the_weighted_mean_of_the_softmaxes():
    logits = torch.tensor([[[0.0, 0.0]], [[math.log(3.0), 0.0]]])  # softmaxes [0.5, 0.5] and [0.75, 0.25]
    probs = mixture_log_probs(logits, torch.tensor([0.5, 0.5])).exp()
    assert probs.tolist() == [pytest.approx([0.625, 0.375])]
