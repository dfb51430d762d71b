"""The Gaussian mechanism's arithmetic on tiny tensors, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from raysim.privacy import secure_sum
from raysim.privacy.mechanisms import clip_factor, clipped, gaussian, l2_norm, next_clip


def test_the_norm_is_over_every_tensor_of_a_message_as_one_vector():
    assert l2_norm({"a": torch.tensor([3.0]), "b": torch.tensor([[4.0, 12.0]])}) == pytest.approx(13.0)


def test_clipping_scales_a_long_message_to_the_bound_and_leaves_a_short_one():
    message = {"a": torch.tensor([3.0]), "b": torch.tensor([4.0])}
    bounded, norm = clipped(message, 1.0)
    assert norm == pytest.approx(5.0)
    assert bounded["a"].tolist() == pytest.approx([0.6]) and bounded["b"].tolist() == pytest.approx([0.8])
    kept, _ = clipped(message, 10.0)
    assert kept["a"].tolist() == [3.0] and kept["b"].dtype == torch.float64
    assert clip_factor(5.0, 5.0) == 1.0 and clip_factor(4.0, 1.0) == 0.25


def test_noise_has_the_asked_spread_and_the_seed_fixes_it():
    like = {"w": torch.zeros(200_000)}
    draw = gaussian(like, 0.5, torch.Generator().manual_seed(1))["w"]
    assert draw.std().item() == pytest.approx(0.5, rel=0.01) and abs(draw.mean().item()) < 0.005
    assert torch.equal(draw, gaussian(like, 0.5, torch.Generator().manual_seed(1))["w"])


def test_adaptive_clipping_moves_geometrically_towards_the_quantile():
    # Andrew et al., Algorithm 1: C exp(-eta (b - gamma)); 80% unclipped with a 50% target shrinks C
    assert next_clip(1.0, 0.8, 0.5, 0.2) == pytest.approx(math.exp(-0.06))
    assert next_clip(2.0, 0.2, 0.5, 0.2) == pytest.approx(2.0 * math.exp(0.06))
    assert next_clip(1.5, 0.5, 0.5, 0.2) == 1.5


def test_secure_aggregation_bytes_follow_the_key_agreement_with_k_neighbours():
    # n = 10: k = min(9, ceil(3 log2 10) = 10) = 9
    assert secure_sum.neighbours(10) == 9 and secure_sum.neighbours(1000) == math.ceil(3 * math.log2(1000))
    down, up = secure_sum.overhead(10)
    assert up == 2 * 32 + 2 * 9 * 48 + 9 * 32 == 1216
    assert down == 9 * 2 * 32 + 2 * 9 * 48 == 1440
    assert secure_sum.overhead(1) == (0.0, 64.0)  # a lone client still advertises its two keys
