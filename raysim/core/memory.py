"""The C heap's free pages handed back to the system once a process's large short-lived buffers are gone."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


def trim_memory() -> bool:
    """Return the free memory malloc keeps to the system (glibc's ``malloc_trim(0)``, which trims every thread's
    arena, as Dask's workers do); True when it ran. Elsewhere (macOS, musl) it does nothing and returns False."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # no libc to load, or one without malloc_trim (musl)
        return False
    return True
