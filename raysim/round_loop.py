"""The driver's loop over rounds: metrics to MLflow, the progress bar, checkpoints, Ctrl-C, and recovery of a
lost coordinator from the last checkpoint.

The loop starts from a :class:`~raysim.checkpoint.Checkpoint` (round 0 for a new run, the saved round for
``--resume``) and keeps the last one it wrote: when the simulation's process dies, it starts a new one from
that checkpoint and replays the rounds since, which give the same numbers (every draw derives from the run
seed), so the run ends as if nothing had happened.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from raysim import checkpoint as ckpt
from raysim.errors import SimulationLost

log = logging.getLogger("raysim")

MAX_RECOVERIES = 3  # in a row without a round completing; then the error stands


class StopRequest:
    """While active, the first Ctrl-C asks the loop to stop after the current round; the second stops at once.

    Only the main thread can own signal handlers; elsewhere (a Ray Tune trial, a thread) Ctrl-C keeps its usual
    meaning.
    """

    def __init__(self, notify: Callable[[str], None]):
        self.requested = False
        self._notify = notify
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the second Ctrl-C raises KeyboardInterrupt
        self._notify("Ctrl-C: finishing this round, then writing a checkpoint (Ctrl-C again to stop at once)")

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@dataclass
class Outcome:
    """Where the loop ended: the last checkpoint (the final round's when it ran to the end) and whether it
    stopped early at the user's request, and where that checkpoint was written."""

    last: ckpt.Checkpoint
    interrupted: bool
    folder: Path | None


def drive(start: ckpt.Checkpoint, make_simulation: Callable[[ckpt.Checkpoint], object], config, tracker,
          run_folder: Path, progress, on_round: Callable[[int, dict, Path | None], None] | None = None) -> Outcome:
    """Run rounds ``start.round + 1 .. config.federation.rounds``; checkpoints every ``checkpoint.every`` rounds,
    after the last round and after an interrupted one. ``on_round(round, metrics, checkpoint folder or None)``
    follows each round (and its checkpoint)."""
    rounds, every, keep = config.federation.rounds, config.checkpoint.every, config.checkpoint.keep
    last, written = start, None
    history, client_acc, records = list(start.history), dict(start.client_acc), list(start.records)
    simulation, failures, graceful = make_simulation(start), 0, False
    round = start.round + 1
    try:
        with StopRequest(progress.note) as stop:
            while round <= rounds:
                try:
                    report = simulation.run_round(round)
                except SimulationLost as error:
                    failures += 1
                    if failures > MAX_RECOVERIES:
                        raise
                    log.warning("round %d: %s; restarting from the checkpoint of round %d", round, error, last.round)
                    simulation.shutdown(graceful=False)
                    simulation = make_simulation(last)
                    history, client_acc, records = list(last.history), dict(last.client_acc), list(last.records)
                    round = last.round + 1
                    continue
                failures = 0
                tracker.log_metrics(report.metrics, step=round)
                history.append({"round": round, **report.metrics})
                client_acc = report.client_acc or client_acc
                if report.records:
                    records.append(report.records)
                progress.advance(round, report.metrics)
                saved = None
                if (every and round % every == 0) or round == rounds or stop.requested:
                    state, client_states = simulation.snapshot()
                    last = replace(start, round=round, config=config.to_dict(), state=state,
                                   client_states=client_states, history=list(history), client_acc=dict(client_acc),
                                   records=list(records))
                    written = saved = last.folder = ckpt.save(run_folder, last, keep)
                if on_round is not None:
                    on_round(round, report.metrics, saved)
                if stop.requested and round < rounds:
                    break
                round += 1
        graceful = True
        return Outcome(last, interrupted=last.round < rounds, folder=written)
    finally:
        simulation.shutdown(graceful=graceful)
