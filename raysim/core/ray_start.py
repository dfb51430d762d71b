"""Ray starting on one thread while another prepares the run (``engine.ray_session.connect_ray_during``): code on
the other thread that needs Ray (a data source's Ray Data, asking how many machines Ray runs on) calls
:func:`wait_for_ray` first, so it waits for that start instead of racing it with a second ``ray.init``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_STARTING = threading.RLock()


@contextmanager
def starting_ray() -> Iterator[None]:
    """Held by the thread that starts Ray, from before it starts the preparing thread until Ray is up (or failed)."""
    with _STARTING:
        yield


def wait_for_ray() -> None:
    """Returns once no thread is starting Ray (at once when none is)."""
    with _STARTING:
        pass
