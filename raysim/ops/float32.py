"""Terms that must stay float32 when the model runs in bf16: a method's arithmetic on a few numbers (an argmax over
near-equal similarities, a difference of dot products divided by a temperature, a sum over a client's rows) loses
in bf16's 8 bits exactly what it measures."""

from __future__ import annotations

import functools

import torch


def in_float32(term):
    """``term`` with autocast off and its floating-point tensor arguments widened to float32 (other arguments as
    given), so it computes in float32 under ``--precision bf16`` too."""

    def widened(value):
        return value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    @functools.wraps(term)
    def computed(*args, **kwargs):
        device = next(a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        with torch.autocast(device, enabled=False):
            return term(*map(widened, args), **{k: widened(v) for k, v in kwargs.items()})

    return computed
