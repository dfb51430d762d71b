"""SIGTERM as a clean stop: what job schedulers (SLURM's time limit, Kubernetes, ``timeout``) send instead of Ctrl-C.

``raysim run`` takes SIGTERM (:func:`take_sigterm`): outside the rounds it raises
:class:`~raysim.base.errors.Terminated` (a ``KeyboardInterrupt``, so everything that cleans up after Ctrl-C cleans up
after it), and during the rounds the driver's ``StopOnCtrlC`` treats it as the first Ctrl-C (finish the round, write
a checkpoint, say how to resume).
``ray.init`` installs a handler of its own (and Ray's native one, which prints a stack trace), so the Ray connection
puts the command's back (:func:`kept_sigterm`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from raysim.base.errors import Terminated


def raise_terminated(signum, frame) -> None:
    raise Terminated()


def take_sigterm() -> None:
    """From now on SIGTERM stops this process as a second Ctrl-C would (only the main thread may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_terminated)


def takes_sigterm() -> bool:
    """Whether this process asked SIGTERM to stop it cleanly (:func:`take_sigterm`)."""
    return signal.getsignal(signal.SIGTERM) is raise_terminated


@contextmanager
def kept_sigterm() -> Iterator[None]:
    """Around ``ray.init``: the process's SIGTERM handler, if it set one in Python, is set again afterwards (Ray's
    replaces it, and Ray's native handler prints a stack trace before calling it). A process that set none keeps
    Ray's (a sweep's driver: Tune stops on it)."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


@contextmanager
def finishing(notify) -> Iterator[None]:
    """Around work that must end whole once begun (a finished run's results, logged in seconds): the first Ctrl-C (or
    SIGTERM, where the process takes it) only says so through ``notify``; the second stops at once, as usual. Only
    the main thread owns signal handlers; elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGINT, signal.SIGTERM) if takes_sigterm() else (signal.SIGINT,)
    previous = {signum: signal.getsignal(signum) for signum in signums}

    def noted(signum, frame):
        for each in signums:
            signal.signal(each, previous[each])  # the second stops at once
        notify(
            f"{'SIGTERM' if signum == signal.SIGTERM else 'Ctrl-C'}: the rounds are done; logging their results, "
            "then the run ends (again to stop at once, without them)"
        )

    for signum in signums:
        signal.signal(signum, noted)
    try:
        yield
    finally:
        for signum in signums:
            signal.signal(signum, previous[signum])
