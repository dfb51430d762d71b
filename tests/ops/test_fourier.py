"""HarmoFL's amplitude normalisation against hand-computed 2x2 spectra."""

import torch

from raysim.ops.fourier import amplitude, low_frequency_mask, normalise_amplitude

X = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # |F| = [[10, 2], [4, 0]], phase [[0, pi], [pi, 0]]
DELTA = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # |F| = 1 everywhere, phase 0


def test_amplitude_and_the_windows():
    assert amplitude(X).tolist() == [[[10.0, 2.0], [4.0, 0.0]]]
    assert low_frequency_mask(4, 4, 0.0).nonzero().tolist() == [[0, 0]]  # the DC term alone
    assert low_frequency_mask(4, 4, 0.25).sum() == 9  # +-1 around DC
    assert low_frequency_mask(32, 32, 0.5).all()


def test_dc_only_shifts_the_mean_intensity():
    target = torch.full((1, 2, 2), 20.0)  # only its DC entry is used
    assert torch.allclose(normalise_amplitude(X, target, 0.0), torch.tensor([[[3.5, 4.5], [5.5, 6.5]]]))


def test_full_replacement_keeps_the_phase():
    assert torch.allclose(normalise_amplitude(DELTA, torch.full((1, 2, 2), 2.0), 0.5), 2 * DELTA, atol=1e-6)
    mean_amp = (amplitude(X) + amplitude(DELTA)) / 2  # [[5.5, 1.5], [2.5, 0.5]]
    assert mean_amp.tolist() == [[[5.5, 1.5], [2.5, 0.5]]]
    assert torch.allclose(normalise_amplitude(X, mean_amp, 0.5), torch.tensor([[[0.5, 1.0], [1.5, 2.5]]]), atol=1e-6)
