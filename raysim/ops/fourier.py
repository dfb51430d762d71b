"""HarmoFL's amplitude normalisation (Jiang, Wang, Dou, AAAI 2022): an image keeps the phase of its Fourier transform
and takes the global mean amplitude in a centred low-frequency window, x_hat = Re F^-1(A' exp(j P(x)))."""

from __future__ import annotations

import math

import torch


def amplitude(x: torch.Tensor) -> torch.Tensor:
    """|F(x)| over the last two dimensions (per channel)."""
    return torch.fft.fft2(x.float()).abs()


def low_frequency_mask(height: int, width: int, window: float) -> torch.Tensor:
    """``[H, W]`` True inside the centred window of half-width b = floor(window * min(H, W)) around the zero
    frequency (the authors' ``mutate`` on the fftshift-ed spectrum), in unshifted order: window 0 is the DC term
    alone, 0.5 the whole spectrum."""
    b = math.floor(window * min(height, width))
    ch, cw = height // 2, width // 2
    mask = torch.zeros(height, width, dtype=torch.bool)
    mask[max(0, ch - b) : ch + b + 1, max(0, cw - b) : cw + b + 1] = True
    return torch.fft.ifftshift(mask)


def normalise_amplitude(x: torch.Tensor, target: torch.Tensor, window: float) -> torch.Tensor:
    """x's amplitude replaced by ``target`` (same trailing shape) inside :func:`low_frequency_mask`, phase kept."""
    spectrum = torch.fft.fft2(x.float())
    mask = low_frequency_mask(*x.shape[-2:], window).to(x.device)
    amp = torch.where(mask, target.to(spectrum.real), spectrum.abs())
    return torch.fft.ifft2(torch.polar(amp, spectrum.angle())).real.to(x.dtype)
