"""A model or method state larger than the memory a process can have, refused in one line: a method's size options
(``raysim ls options METHOD``: a hypernetwork's width, a pool of prompts, a number of groups) can ask for tensors no
machine holds, which torch refuses with a traceback of its allocator's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from raysim.base.errors import ConfigError

CPU_REFUSAL = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")  # torch's CPU allocator
CUDA_REFUSAL = re.compile(r"Tried to allocate ([\d.]+ [KMGTP]iB)")  # torch.OutOfMemoryError on a GPU
OVERFLOWS = ("Storage size calculation overflowed", "Overflow when unpacking long long")  # sizes past 2^63


def refused_allocation(error: BaseException) -> str | None:
    """How much memory ``error`` says could not be allocated ("40.0 GB", "20.00 GiB"; "memory" where Python's
    MemoryError does not say; "more than 2^63 bytes" where torch could not count the bytes), or None where it is no
    refused allocation."""
    if isinstance(error, MemoryError):
        return "memory"
    if not isinstance(error, (RuntimeError, TypeError)):
        return None
    if any(overflow in str(error) for overflow in OVERFLOWS):
        return "more than 2^63 bytes"
    if found := CPU_REFUSAL.search(str(error)):
        return f"{int(found[1]) / 1e9:,.1f} GB"
    if found := CUDA_REFUSAL.search(str(error)):
        return found[1]
    return None


@contextmanager
def refused_if_too_large(method: str) -> Iterator[None]:
    """Turns a refused allocation while ``method``'s model or state is built into a one-line ConfigError."""
    try:
        yield
    except (MemoryError, RuntimeError, TypeError) as error:
        wanted = refused_allocation(error)
        if wanted is None:
            raise
        raise ConfigError(
            f"{method}'s model and state do not fit in memory (an allocation of {wanted} was refused); lower its "
            f"size options (raysim ls options {method})"
        ) from None
