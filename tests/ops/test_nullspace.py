"""FedPR's null-space projection against a hand-computed 3-d case."""

import math

import pytest
import torch

from raysim.ops.nullspace import null_space_projector

PROMPT = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])  # G = P^T P = diag(1, 4, 0): V = [e2, e1, e3]


def test_projector_drops_the_top_directions_hand_computed():
    # ratio 0.5: r = floor(3 * 0.5) = 1 -> drop e2; B = [e1, e3], B B^T = diag(1, 0, 1), / ||.||_F = sqrt(2)
    t = null_space_projector(PROMPT, 0.5)
    s = 1 / math.sqrt(2)
    assert t.tolist() == [pytest.approx(row, abs=1e-6) for row in ([s, 0, 0], [0, 0, 0], [0, 0, s])]
    update = torch.tensor([[0.3, 0.3, 0.3]])
    assert (update @ t).tolist() == [pytest.approx([0.212132, 0.0, 0.212132], abs=1e-6)]
    assert (update @ null_space_projector(PROMPT, 0.5, normalise=False)).tolist() == [pytest.approx([0.3, 0, 0.3])]


def test_a_projected_update_leaves_the_top_directions_alone():
    t = null_space_projector(PROMPT, 0.4, normalise=False)  # r = 1: only e2 (sigma 4) is protected
    assert (torch.randn(5, 3) @ t)[:, 1].abs().max() < 1e-6


def test_the_dropped_count_is_the_floor_where_it_is_whole():
    """D = 10, ratio 0.8: floor(10 * 0.2) = 2 directions dropped, 8 kept (1 - 0.8 is 0.1999... in floats, whose
    truncation would keep 9)."""
    prompt = torch.cat([torch.diag(torch.arange(10.0, 0.0, -1.0)), torch.zeros(2, 10)])
    t = null_space_projector(prompt, 0.8, normalise=False)
    assert torch.linalg.matrix_rank(t).item() == 8
    assert (prompt @ t)[:2].abs().max() < 1e-6  # the two largest directions (e1, e2) are left alone
