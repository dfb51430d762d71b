"""Numeric precision of client compute: float32, or bfloat16 autocast (mixed precision: weights, optimiser state,
losses and everything communicated stay float32), and ``auto``, which picks bf16 only where it is fast.

bf16 autocast is fast only where the hardware has bf16 arithmetic. Measured here on the default ViT-Tiny
(``python bench/precision.py``): with AVX-512 BF16 a local training step takes 0.6x and an evaluation
forward 0.4x the float32 time, but with oneDNN limited to AVX2 (most laptops) training is about 15x *slower*
than float32. Hence ``auto`` resolves, once on the driver when the config is built, to bf16 only for clients on
CPUs with native bf16 and for methods whose math tolerates it; the resolved value is what the run records.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from raysim.core.errors import ConfigError

_NATIVE_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
AUTO_ENV = "RAYSIM_PRECISION"  # decides train.precision=auto for every run of this environment (a test matrix)


def native_bf16_cpu() -> bool:
    """Whether this machine's CPU computes bf16 natively (x86 AVX-512 BF16 or AMX), as torch detects it."""
    import torch

    return any(getattr(torch.cpu, probe, lambda: False)() for probe in _NATIVE_BF16_PROBES)


def resolve(precision: str, *, method_allows: bool, on_gpu: bool, native_cpu: Callable[[], bool]) -> str:
    """``auto`` -> "bf16" for CPU clients with native bf16 (``native_cpu()``, asked only when it matters) when the
    method allows it, else "fp32"; "fp32" and "bf16" as given. ``RAYSIM_PRECISION=fp32|bf16`` in the environment
    decides ``auto`` instead (methods that need float32 keep it).

    GPUs resolve to fp32 because the driver cannot see the workers' GPUs; set ``train.precision=bf16`` there
    (Ampere and later do bf16 natively).
    """
    if precision != "auto":
        return precision
    forced = os.environ.get(AUTO_ENV)
    if forced:
        if forced not in ("fp32", "bf16"):
            raise ConfigError(f"{AUTO_ENV}={forced!r} must be fp32 or bf16 (what train.precision=auto becomes)")
        return forced if method_allows else "fp32"
    return "bf16" if method_allows and not on_gpu and native_cpu() else "fp32"


def full_width(tensor):
    """``tensor`` as float32 if bf16 autocast made it bfloat16, else unchanged (integers, float64 stay as they are)."""
    import torch

    return tensor.float() if tensor.dtype == torch.bfloat16 else tensor


def autocast(device, precision: str):
    """The context that client compute runs in: bf16 autocast on ``device``, or nothing for fp32."""
    import torch

    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp32":
        return contextlib.nullcontext()
    raise ValueError(
        f"train.precision={precision!r} was not resolved; resolve the config first "
        f"(raysim.engine.setup.resolved, as the driver does)"
    )
