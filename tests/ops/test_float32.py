"""in_float32: a term computes in float32 under bf16 autocast, equal to its float32 value outside autocast."""

from __future__ import annotations

import torch

from raysim.ops.float32 import in_float32
from raysim.ops.selection import cosine


def test_selection_cosine_is_float32_under_bf16_autocast():
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(64, 192, generator=generator).bfloat16()
    keys = torch.randn(10, 192, generator=generator)
    expected = cosine(queries.float(), keys)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = cosine(queries, keys)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_only_floating_tensor_arguments_are_widened():
    @in_float32
    def seen(a, b, index, scale, missing=None):
        return a.dtype, b.dtype, index.dtype, scale, missing, torch.is_autocast_enabled("cpu")

    a, b, index = torch.ones(2).bfloat16(), torch.ones(2).half(), torch.arange(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert seen(a, b=b, index=index, scale=0.5) == (torch.float32, torch.float32, torch.int64, 0.5, None, False)
