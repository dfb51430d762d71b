"""A model or state no process can hold is one line, not the allocator's traceback."""

from __future__ import annotations

import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.engine.too_large import refused_allocation, refused_if_too_large


def test_a_refused_allocation_says_how_much_and_which_options_to_lower():
    with pytest.raises(ConfigError) as refused, refused_if_too_large("pfedhn"):
        torch.empty(10**15)  # 4 PB, past any address space: refused however the kernel overcommits
    assert str(refused.value) == (
        "pfedhn's model and state do not fit in memory (an allocation of 4,000,000.0 GB was refused); lower its size "
        "options (raysim ls options pfedhn)"
    )
    with pytest.raises(ConfigError, match=r"an allocation of memory was refused"), refused_if_too_large("fedem"):
        raise MemoryError
    for size in ((10**17, 1, 5, 64), (10**20,)):  # bytes torch cannot count: a RuntimeError, a TypeError
        with pytest.raises(ConfigError, match=r"an allocation of more than 2\^63 bytes"), refused_if_too_large("fedem"):
            torch.empty(size)


def test_other_errors_pass_through_and_a_gpus_refusal_is_read():
    with pytest.raises(RuntimeError, match="shape mismatch"), refused_if_too_large("fedvpt"):
        raise RuntimeError("shape mismatch")
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79")
    assert refused_allocation(cuda) == "20.00 GiB"
    assert refused_allocation(ValueError("can't allocate memory: you tried to allocate 8 bytes")) is None
