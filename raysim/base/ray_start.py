"""Ray starting on one thread while another prepares the run (``engine.ray_connect.connect_ray_during``): code on
the other thread that needs Ray (a data source's Ray Data, asking how many machines Ray runs on) calls
:func:`wait_for_ray` first, so it waits for that start instead of racing it with a second ``ray.init``; or, where the
run starts no Ray (the sequential backend), :func:`ensure_ray`, to have it started."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_STARTING = threading.RLock()


class RayDidNotStart(RuntimeError):
    """Ray's start failed while this thread prepared the run (the starting thread reports why)."""


@contextmanager
def starting_ray(preparing: threading.Thread) -> Iterator[None]:
    """Held by the thread that starts Ray, from before it starts the ``preparing`` thread until Ray is up (or
    failed); when the start fails, ``preparing`` learns so at its next :func:`wait_for_ray`."""
    with _STARTING:
        try:
            yield
        except BaseException as error:
            preparing.ray_failed = error
            raise


def wait_for_ray() -> None:
    """Returns once no thread is starting Ray (at once when none is); in a preparing thread whose Ray failed to
    start, raises :class:`RayDidNotStart`, so that it stops rather than start a Ray of its own (Ray starts one on
    first use)."""
    with _STARTING:
        failed = getattr(threading.current_thread(), "ray_failed", None)
        if failed is not None:
            raise RayDidNotStart(f"Ray did not start: {failed}")


def ensure_ray() -> None:
    """:func:`wait_for_ray`; then, on the set-up thread of a run that starts no Ray unless asked (the sequential
    backend), has the thread that runs the run start it (the set-up thread's ``ask_for_ray``, given it by
    ``engine.ray_connect.connect_ray_during``), since Ray's daemons end with the thread that starts them. Raises
    :class:`RayDidNotStart` where that start failed. Elsewhere Ray is up, or starts on first use."""
    wait_for_ray()
    ask = getattr(threading.current_thread(), "ask_for_ray", None)
    if ask is not None:
        started = threading.Event()
        ask(started)
        started.wait()
        wait_for_ray()
