"""glibc's malloc, told how a tensor-computing process uses memory: keep what a forward freed for the next one
(:func:`reuse_freed_memory`), and hand the free pages back once large short-lived buffers are gone
(:func:`trim_memory`). Both do nothing where the C library is not glibc (macOS, musl)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
REUSED_BYTES = 1 << 30
# glibc's own settings of the two thresholds: a user who set one chose for this process (mallopt would override it)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def _glibc() -> ctypes.CDLL | None:
    return _loaded_glibc() if sys.platform.startswith("linux") else None


@functools.cache
def _loaded_glibc() -> ctypes.CDLL | None:
    """The C library, looked up once per process (every evaluation trims)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None  # musl has neither


def reuse_freed_memory(limit: int = REUSED_BYTES) -> bool:
    """Serve blocks up to ``limit`` bytes from the heap and keep up to ``limit`` bytes of it free, instead of glibc's
    default (a block over 32 MB, or what its sliding threshold says, gets its own mapping, and the heap's free top
    goes back to the system): a CPU forward of ViT-Tiny over 256 rows otherwise maps, faults in and unmaps about
    1 GB of fresh pages (270,000 page faults) every batch, and runs 1.7x slower. The pages stay the process's until
    :func:`trim_memory`. Left to the user where the environment sets either threshold (``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_`` or in ``GLIBC_TUNABLES``; e.g. ``MALLOC_TRIM_THRESHOLD_=131072``, glibc's default, gives
    an evaluation's heap back as it goes, for a slower evaluation). True when glibc took both settings."""
    libc = _glibc()
    return (
        libc is not None
        and not user_set_thresholds()
        and bool(libc.mallopt(M_MMAP_THRESHOLD, limit))
        and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))
    )


def user_set_thresholds() -> bool:
    """Whether the environment gives glibc either threshold itself."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in USER_SETTINGS) or any(name in tunables for name in USER_TUNABLES)


def trim_memory() -> bool:
    """Return the free memory malloc keeps to the system (glibc's ``malloc_trim(0)``, which trims every thread's
    arena, as Dask's workers do); True when it ran."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
