"""Ray Tune's console output as raysim's commands want it: without Tune's restore hint (each command says how it
resumes), and silent where a command draws its own progress (``raysim compare``)."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager


def _not_tunes_restore_hint(record: logging.LogRecord) -> bool:
    """False for Tune's "Resume experiment with: Tuner.restore(...)" after a Ctrl-C."""
    return "Tuner.restore" not in record.getMessage()


@contextmanager
def without_restore_hint():
    """Tune's console without its restore hint: ``raysim tune`` and ``raysim compare`` say how to resume them (their
    own command), and Tune's ``Tuner.restore`` is not it. Tune's other warnings stay (a trial the cluster cannot
    host, a trial's error)."""
    tunes = logging.getLogger("ray.tune.tune")
    tunes.addFilter(_not_tunes_restore_hint)
    try:
        yield
    finally:
        tunes.removeFilter(_not_tunes_restore_hint)


@contextmanager
def tune_silent():
    """Tune without its own console output: its newer engine prints the experiment's box and paths at any
    verbosity, so the older one (``RAY_AIR_NEW_OUTPUT=0``), which ``verbose=0`` silences, for the ``fit``; and
    without its restore hint."""
    before = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        with without_restore_hint():
            yield
    finally:
        if before is None:
            del os.environ["RAY_AIR_NEW_OUTPUT"]
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = before
