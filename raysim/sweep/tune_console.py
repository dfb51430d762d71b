"""Ray Tune's console output as raysim's commands want it: without Tune's restore hint (each command says how it
resumes), silent where a command draws its own progress (``raysim compare``, ``raysim tune``), and Ctrl-C left to
the command."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager


def _not_tunes_restore_hint(record: logging.LogRecord) -> bool:
    """False for Tune's "Resume experiment with: Tuner.restore(...)" after a Ctrl-C."""
    return "Tuner.restore" not in record.getMessage()


# Tune's own output that raysim's commands replace: its newer engine prints the experiment's box and paths at any
# verbosity, so the older one, which ``verbose=0`` silences; and its warning that checkpointing every round makes
# it snapshot its state often (a sweep's trials checkpoint each evaluated round on purpose: ASHA and a restored
# sweep resume from them), which no user can act on. And Tune's own Ctrl-C handler: it ends the fit quietly and
# returns the trials so far as if the sweep were done (a comparison would rank a method's tuning by the trials it
# had run, and go on); without it, Ctrl-C is a KeyboardInterrupt out of ``fit`` and the command stops there, as it
# says, and resumes from its trials' checkpoints
SILENT = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
}


@contextmanager
def tune_silent():
    """Tune without its own console output and Ctrl-C handler (:data:`SILENT`), for a ``fit`` whose command draws
    its own progress, and without its restore hint: ``raysim tune`` and ``raysim compare`` say how to resume them
    (their own command), and Tune's ``Tuner.restore`` is not it; Tune's other warnings stay (a trial the cluster
    cannot host, a trial's error). The environment is restored after."""
    before = {name: os.environ.get(name) for name in SILENT}
    os.environ.update(SILENT)
    tunes = logging.getLogger("ray.tune.tune")
    tunes.addFilter(_not_tunes_restore_hint)
    try:
        yield
    finally:
        tunes.removeFilter(_not_tunes_restore_hint)
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
