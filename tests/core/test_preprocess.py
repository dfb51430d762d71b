"""Pixels to model input (:func:`raysim.base.preprocess.to_model_input`): shapes, values by hand, bad input."""

from __future__ import annotations

import pytest
import torch

from raysim.base.preprocess import to_model_input


def test_to_model_input_shapes_and_range():
    grey = torch.randint(0, 256, (2, 8, 8), dtype=torch.uint8)
    out = to_model_input(grey, 32, (0.5,) * 3, (0.5,) * 3)
    assert out.shape == (2, 3, 32, 32) and out.dtype == torch.float32
    assert out.min() >= -1 and out.max() <= 1
    assert torch.equal(out[:, 0], out[:, 1]) and torch.equal(out[:, 0], out[:, 2])
    assert torch.equal(to_model_input(grey.unsqueeze(-1), 32, (0.5,) * 3, (0.5,) * 3), out)
    rgb = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8)
    assert to_model_input(rgb, 32, (0.5,) * 3, (0.5,) * 3).shape == (3, 3, 32, 32)


def test_to_model_input_values_by_hand():
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rgb = torch.tensor([[[[128, 0, 255]]]], dtype=torch.uint8)  # one 1x1 image, channels last
    out = to_model_input(rgb, 1, mean, std)
    expected = [(128 / 255 - 0.485) / 0.229, (0 - 0.456) / 0.224, (1 - 0.406) / 0.225]
    assert torch.allclose(out.flatten(), torch.tensor(expected), atol=1e-6)
    # bilinear 2 -> 4 with align_corners=False samples at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped)
    step = torch.tensor([[[0, 255], [0, 255]]], dtype=torch.uint8)
    row = to_model_input(step, 4, (0.0,) * 3, (1.0,) * 3)[0, 0, 0]
    assert torch.allclose(row, torch.tensor([0.0, 0.25, 0.75, 1.0]), atol=1e-6)


def test_to_model_input_rejects_bad_input():
    with pytest.raises(ValueError, match="uint8"):
        to_model_input(torch.zeros(1, 4, 4), 4, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match="C in \\(1, 3\\)"):
        to_model_input(torch.zeros(1, 4, 4, 2, dtype=torch.uint8), 4, (0.5,) * 3, (0.5,) * 3)
