"""Numeric precision of client compute: float32, or bfloat16 autocast (mixed precision: weights, optimiser state,
losses and everything communicated stay float32); ``auto`` is float32.

bf16 autocast is fast only where the hardware has bf16 arithmetic. Measured on the default ViT-Tiny
(``python bench/precision.py``): with AVX-512 BF16 a local training step takes 0.6x and an evaluation forward 0.4x
the float32 time; with oneDNN limited to AVX2 (most laptops) training is about 15x *slower*.

Autocast runs without its cast cache. The cache keeps one bf16 copy of each trainable leaf for as long as the
autocast region lasts, and local training is one region of many optimiser steps: every step after the first ran
the forward with the weights of the first (a 5-round FedVPT run on low-contrast images reached 55% in bf16 against
96% in float32). Without the cache bf16 tracks float32 within seed noise on that workload (3 seeds: 90.0/88.1/86.9
against 89.7/88.8/87.0). ``auto`` nevertheless stays float32 until a table over every method shows bf16 within noise
(bench/precision.py); ``--precision bf16`` opts in, and the run's header says when it would be faster.
"""

from __future__ import annotations

import contextlib
import os
import platform

from raysim.base.errors import ConfigError

_NATIVE_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
_NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_tile"}  # the same, as Linux names them in /proc/cpuinfo
AUTO_ENV = "RAYSIM_PRECISION"  # decides train.precision=auto for every run of this environment (a test matrix)


def native_bf16_cpu() -> bool:
    """Whether this machine's CPU computes bf16 natively (x86 AVX-512 BF16 or AMX), as torch detects it; without
    torch where it can (a Ray run's driver imports none): no on a CPU that is not x86, the CPU's flags in
    ``/proc/cpuinfo`` on Linux, torch's own probes elsewhere (macOS and Windows on x86)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return False
    try:
        with open("/proc/cpuinfo") as info:
            flags = {flag for line in info if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        import torch

        return any(getattr(torch.cpu, probe, lambda: False)() for probe in _NATIVE_BF16_PROBES)
    return bool(flags & _NATIVE_BF16_FLAGS)


def resolve(precision: str, *, method_allows: bool) -> str:
    """``auto`` -> "fp32"; "fp32" and "bf16" as given. ``RAYSIM_PRECISION=fp32|bf16`` in the environment decides
    ``auto`` instead (a test matrix; methods that need float32 keep it)."""
    if precision != "auto":
        return precision
    forced = os.environ.get(AUTO_ENV)
    if forced and forced not in ("fp32", "bf16"):
        raise ConfigError(f"{AUTO_ENV}={forced!r} must be fp32 or bf16 (what train.precision=auto becomes)")
    return forced if forced and method_allows else "fp32"


def full_width(tensor):
    """``tensor`` as float32 if bf16 autocast made it bfloat16, else unchanged (integers, float64 stay as they are)."""
    import torch

    return tensor.float() if tensor.dtype == torch.bfloat16 else tensor


def autocast(device, precision: str):
    """The context that client compute runs in: bf16 autocast on ``device``, or nothing for fp32."""
    import torch

    if precision == "bf16":  # no cast cache: local training updates the weights inside one region
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    if precision == "fp32":
        return ieee_float32() if device.type == "cuda" else contextlib.nullcontext()
    raise ValueError(
        f"train.precision={precision!r} was not resolved; resolve the config first "
        f"(raysim.engine.setup.resolved, as the driver does)"
    )


@contextlib.contextmanager
def ieee_float32():
    """float32 convolutions as IEEE float32 on a GPU while the block runs. cuDNN runs them in TF32 by default
    (``torch.backends.cudnn.allow_tf32``; matrix products are IEEE already), which rounds the patch embedding's
    inputs to 10 mantissa bits: "fp32" here means float32 throughout. The flag is the API every torch since 1.7
    reads; torch 2.9's ``fp32_precision`` settings follow it (setting only the newer one for convolutions makes
    reading the flag raise)."""
    import torch

    cudnn = torch.backends.cudnn
    before, cudnn.allow_tf32 = cudnn.allow_tf32, False
    try:
        yield
    finally:
        cudnn.allow_tf32 = before
