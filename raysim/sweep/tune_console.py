"""Ray Tune's console output and Ctrl-C as raysim's commands want them: without Tune's restore hint (each command
says how it resumes), silent where a command draws its own progress (``raysim compare``, ``raysim tune``) and in
its trials' processes, a Ctrl-C that stops the command instead of passing for the end of the fit, and no traceback
from a trial's exit or from a failed copy of Tune's state."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from raysim.base.errors import Terminated, first_line

if TYPE_CHECKING:
    from ray import tune


class _TunesStopLines(logging.Filter):
    """Drops what Tune logs when a fit ends short, which raysim's commands say their own way (the stop, how to
    resume, each failed trial's error in a line): its "Stop signal received ...", its "Resume experiment with:
    Tuner.restore(...)" and its "Trials did not complete: [...]" (the trials a stop cut, or that failed)."""

    def __init__(self):
        super().__init__()
        self.stopped_at: float | None = None  # when Tune's handler fired (it logs the line from the signal handler)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Stop signal received"):
            self.stopped_at = time.time()
            return False
        return "Tuner.restore" not in message and not message.startswith("Trials did not complete")


class _TunesUnreportedTrials(logging.Filter):
    """After a stop (``stop_lines`` noted one), drops Tune's "Failed to fetch metrics for N trial(s): ...
    FileNotFoundError(...)": the trials the stop cut before they reported a round, which a resumed sweep or
    comparison runs again."""

    def __init__(self, stop_lines: _TunesStopLines):
        super().__init__()
        self.stop_lines = stop_lines

    def filter(self, record: logging.LogRecord) -> bool:
        stopped = self.stop_lines.stopped_at is not None
        return not (stopped and record.getMessage().startswith("Failed to fetch metrics"))


class _TunesSlowSteps(logging.Filter):
    """Drops Tune's "The `on_step_begin` operation took 0.865 s, which may be a performance bottleneck.": its timing
    of its own loop, which a busy machine (a 2-core laptop running two trials) passes and no user can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "may be a performance bottleneck" not in record.getMessage()


class _TunesStateCopyFailures(logging.Filter):
    """Tune's "Saving experiment state to storage at '...' failed with exception:" in one line: the exception's type
    and first line in place of its traceback. Tune writes its state into a staging folder, each file through a
    temporary one renamed into place, and copies the folder to the sweep's storage in a background thread; a save
    that overlaps the last copy can rename away a temporary file the copy listed, and that copy fails with
    ``FileNotFoundError`` (Tune's atomic save, looped beside its syncer's copies, reproduces it; the suite saw it at a
    sweep's Ctrl-C on a busy machine). Every save starts a new copy of the whole folder, so the storage keeps the
    state of the last copy that succeeded."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith("Saving experiment state to storage"):
            error = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}{type(error).__name__}: {first_line(error)}", ()
            record.exc_info = record.exc_text = None
        return True


# Tune's own output that raysim's commands replace: its newer engine prints the experiment's box and paths at any
# verbosity, so the older one, which ``verbose=0`` silences; and its warning that checkpointing every round makes
# it snapshot its state often (a sweep's trials checkpoint each evaluated round on purpose: ASHA and a restored
# sweep resume from them), which no user can act on; and a failed trial's traceback, which raysim's progress says in
# one line with the path of Tune's error file. And Tune's Ctrl-C handler on, whatever the environment says:
# :func:`fit` relies on it
SILENT = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "0",
}


class TuneStopped(KeyboardInterrupt):
    """Ctrl-C (or a SIGTERM: ``signum``) stopped a fit; ``at``: when (epoch seconds). A trial the stop cuts short can
    fail on its way out (a run of the suite saw one end FAILED): a run that ended FAILED after ``at`` was stopped, not
    failed."""

    def __init__(self, at: float, signum: int = signal.SIGINT):
        super().__init__(at)
        self.at, self.signum = at, signum


def stopped_at(stop: KeyboardInterrupt) -> float | None:
    """When a fit's Ctrl-C came (:class:`TuneStopped`); None for a plain ``KeyboardInterrupt`` (one outside a fit, or
    a Ctrl-C before Tune's handler noted any)."""
    return stop.at if isinstance(stop, TuneStopped) else None


@contextmanager
def tune_silent():
    """Tune without its own console output (:data:`SILENT`) and its Ctrl-C lines, for a ``fit`` whose command draws
    its own progress and says how to resume (``raysim tune --resume``, the comparison's own command; Tune's
    ``Tuner.restore`` is neither) and its timing of its own loop (:class:`_TunesSlowSteps`), and a failed copy of its
    state in one line (:class:`_TunesStateCopyFailures`), and after a stop its warning about the trials the stop cut
    before they reported (:class:`_TunesUnreportedTrials`); Tune's other warnings stay (a trial the cluster cannot
    host, a trial's error).
    The environment is restored after. Yields the filter of Tune's stop lines, which notes when Ctrl-C came."""
    before = {name: os.environ.get(name) for name in SILENT}
    os.environ.update(SILENT)
    tunes, stop_lines = logging.getLogger("ray.tune.tune"), _TunesStopLines()
    timings, slow_steps = logging.getLogger("ray.tune.utils.util"), _TunesSlowSteps()
    state, copy_failures = logging.getLogger("ray.tune.execution.experiment_state"), _TunesStateCopyFailures()
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    unreported = _TunesUnreportedTrials(stop_lines)
    filtered = ((tunes, stop_lines), (timings, slow_steps), (state, copy_failures), (analysis, unreported))
    for logger, kept_out in filtered:
        logger.addFilter(kept_out)
    try:
        yield stop_lines
    finally:
        for logger, kept_out in filtered:
            logger.removeFilter(kept_out)
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def fit(tuner: tune.Tuner) -> tune.ResultGrid:
    """``tuner.fit()`` under :func:`tune_silent`, where Ctrl-C raises :class:`TuneStopped` once Tune has stopped.

    Tune's Ctrl-C handler ends the fit after saving the experiment's state with each trial's latest checkpoint (a
    resumed sweep continues its trials from them), then returns the trials so far as if the sweep were done. When it
    fires it puts back the handler it found, and Tune never removes it otherwise: so the handler found is a sentinel
    here, and finding it again after the fit means Ctrl-C. A second Ctrl-C reaches the sentinel: it stops at once.
    A SIGTERM (a scheduler's stop) is a Ctrl-C here, and the :class:`TuneStopped` says so."""
    if threading.current_thread() is not threading.main_thread():  # Tune handles no signal off the main thread
        with tune_silent():
            return tuner.fit()
    handler, on_term, terminated = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), []

    def sentinel(signum, frame):
        raise KeyboardInterrupt

    def as_ctrl_c(signum, frame):
        terminated.append(signum)
        signal.raise_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, sentinel)
    signal.signal(signal.SIGTERM, as_ctrl_c)
    stop_lines = None
    try:
        with tune_silent() as stop_lines:
            results = tuner.fit()
    except KeyboardInterrupt:  # a second Ctrl-C (the sentinel): the first one's moment still counts
        if stop_lines is not None and stop_lines.stopped_at is not None:
            raise TuneStopped(stop_lines.stopped_at, _signum(terminated)) from None
        raise
    finally:
        stopped = signal.getsignal(signal.SIGINT) is sentinel
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, on_term)
    if stopped:
        raise TuneStopped(stop_lines.stopped_at or time.time(), _signum(terminated))
    return results


def _signum(terminated: list[int]) -> int:
    return signal.SIGTERM if terminated else signal.SIGINT


def stop_signum(stop: KeyboardInterrupt) -> int:
    """The signal that stopped a command: SIGTERM for a :class:`~raysim.base.errors.Terminated` or a fit a SIGTERM
    stopped, else SIGINT (Ctrl-C)."""
    if isinstance(stop, Terminated) or getattr(stop, "signum", signal.SIGINT) == signal.SIGTERM:
        return signal.SIGTERM
    return signal.SIGINT


def quiet_trial_logs() -> None:
    """In a trial's process, before Tune restores or starts the trial: none of the INFO lines Tune's trainable logs
    and Ray forwards to the command's terminal, each prefixed ``(_trial pid=...)``: "Checkpoint successfully created
    at: ..." for every round a trial checkpoints, "Restored on <ip> from checkpoint: ..." for every trial a resumed
    sweep restores (the command says what it resumes) and "Trainable.setup took ... s". Their warnings stay."""
    for name in ("ray.train._internal.storage", "ray.tune.trainable.trainable"):
        logging.getLogger(name).setLevel(logging.WARNING)


_hook_before_trial = sys.__unraisablehook__  # the hook a trial's process had before quiet_trial_exit


def quiet_trial_exit() -> None:
    """In a trial's process: no traceback when the trial's end interrupts a weak reference's callback. Tune ends a
    finished trial's process with SIGTERM, whose Ray handler raises ``SystemExit`` wherever the main thread is;
    raised inside such a callback (the garbage collector runs them), Python cannot propagate it and prints
    "Exception ignored in: <function WeakSet...> ... SystemExit: 1", which Ray forwards to the command's terminal
    (seen after a few ``raysim compare`` cells). The process ends either way (Ray follows with SIGKILL); every
    other report goes to the hook this one replaces."""
    global _hook_before_trial
    if sys.unraisablehook is not _drop_exit_reports:
        _hook_before_trial, sys.unraisablehook = sys.unraisablehook, _drop_exit_reports


def _drop_exit_reports(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook`` in a trial: all but a ``SystemExit`` go on to the hook it replaced."""
    if not isinstance(unraisable.exc_value, SystemExit):
        _hook_before_trial(unraisable)
