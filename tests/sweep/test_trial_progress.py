"""What ``raysim compare`` and ``raysim tune`` show while their runs go, on real Tune runs of tiny trainables: a
line per cell or trial started and ended (stopped early, failed: its error in one line), Tune's own tables and
warnings silenced, and the environment as it was; Tune's "Tuner.restore" hint dropped after a Ctrl-C (a comparison
resumes by running the same command, a sweep by ``raysim tune --resume``); a trial's exit without a traceback, and a
failed copy of Tune's state in one line."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray import tune
from rich.console import Console

from raysim.base.errors import Terminated
from raysim.sweep.trial_progress import CellProgress, SweepProgress
from raysim.sweep.tune_console import SILENT, TuneStopped, fit, stop_signum, stopped_at, tune_silent
from raysim.testing.console import own_lines


def test_cells_are_shown_by_name_with_their_ends_and_a_failure_in_one_line(ray_session, tmp_path, capfd):
    def _cell(config):  # defined here, so that Tune's workers get it by value (they cannot import tests/)
        label, seed = config["cell"]
        if label == "broken":
            raise ValueError("the cell's own error")
        for round in (1, 2):
            tune.report({"global_acc": 10.0 * round + seed, "round": round})

    shown = io.StringIO()
    progress = CellProgress({"fedavg/s1": 2, "broken/s0": 2}, finished=3, console=Console(file=shown))
    tuner = tune.Tuner(
        tune.with_resources(_cell, {"cpu": 0.5}),
        param_space={"cell": tune.grid_search([("fedavg", 1), ("broken", 0)])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[progress]),
    )
    before = {name: os.environ.get(name) for name in SILENT}, signal.getsignal(signal.SIGINT)
    fit(tuner)  # and Tune's Ctrl-C handler, which it leaves installed after a fit, is gone again
    assert ({name: os.environ.get(name) for name in SILENT}, signal.getsignal(signal.SIGINT)) == before
    assert "RAY_AIR_NEW_OUTPUT" in SILENT
    lines = shown.getvalue().splitlines()
    assert lines[:3] == [
        "started fedavg/s1",
        "finished fedavg/s1: final global accuracy 21.00 (4 of 5 cells done)",
        "started broken/s0",
    ]
    assert lines[3].startswith("failed broken/s0: ValueError: the cell's own error (the trace: ")
    assert lines[3].endswith(" (5 of 5 cells done, 1 failed)") and len(lines) == 4
    printed = capfd.readouterr()
    assert "Configuration for experiment" not in printed.out + printed.err  # nor Tune's box, nor its tables


def test_trials_open_with_their_values_and_a_stopped_or_restored_trial_says_so(ray_session, tmp_path, capfd):
    flag = tmp_path / "failed-once"

    def _trial(config):  # lr 0.5 stops after round 1 (as ASHA stops a trial); lr 0.25 fails on its first try
        if config["train.lr"] == 0.25 and not flag.exists():
            flag.touch()
            raise ValueError("first try")
        for round in (1, 2) if config["train.lr"] != 0.5 else (1,):
            tune.report({"worst_local_acc": 100 * config["train.lr"] + round, "round": round})

    def fitted(tuner):
        fit(tuner)
        return own_lines(capfd.readouterr().err)

    progress = SweepProgress(samples=3, rounds=2, metric="worst_local_acc")
    space = {"train.lr": tune.grid_search([0.125, 0.5, 0.25]), "sgpt.groups": 4}
    tuner = tune.Tuner(
        tune.with_resources(_trial, {"cpu": 0.5}),
        param_space=space,
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name="sweep", storage_path=str(tmp_path), verbose=0, callbacks=[progress]),
    )
    lines = fitted(tuner)
    assert lines[:4] == [
        "started trial 1 of 3: train.lr=0.125, sgpt.groups=4",
        "finished trial 1: final worst local accuracy 14.50 (1 of 3 trials done)",
        "started trial 2 of 3: train.lr=0.5, sgpt.groups=4",
        "stopped trial 2 at round 1 of 2: worst local accuracy 51.00 (2 of 3 trials done)",
    ]
    assert lines[5].startswith("failed trial 3: ValueError: first try") and len(lines) == 6
    assert lines[5].endswith("(3 of 3 trials done, 1 failed)")
    # restored (as raysim tune --resume does), the failed trial runs again and the finished two are counted
    lines = fitted(
        tune.Tuner.restore(str(tmp_path / "sweep"), tune.with_resources(_trial, {"cpu": 0.5}), resume_errored=True)
    )
    assert lines == [
        "started trial 3 of 3: train.lr=0.25, sgpt.groups=4",
        "finished trial 3: final worst local accuracy 27.00 (3 of 3 trials done)",
    ]


@contextlib.contextmanager
def records(name: str):
    """The records logger ``name`` emits meanwhile (Ray's loggers do not propagate to pytest's caplog)."""
    logger, kept, handler = logging.getLogger(name), [], logging.Handler()
    handler.emit = kept.append
    logger.addHandler(handler)
    try:
        yield kept
    finally:
        logger.removeHandler(handler)


def test_tunes_restore_hint_is_dropped_and_its_other_warnings_kept():
    tunes = logging.getLogger("ray.tune.tune")
    with records("ray.tune.tune") as kept:
        with tune_silent():
            tunes.warning("Experiment has been interrupted, ...\nResume experiment with: Tuner.restore(path=...)")
            tunes.warning("No trial is running and no new trial has been started within the last 60 seconds.")
            tunes.error("Trials did not complete: [_trial_00001]")  # raysim's progress named each failed trial
            assert os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] == "0"  # nor Tune's traceback of each: its line does
        tunes.warning("Resume experiment with: Tuner.restore(path=...)")  # outside a comparison, as Tune says it
    assert [r.getMessage()[:17] for r in kept] == ["No trial is runni", "Resume experiment"]


def test_the_moment_of_tunes_stop_is_noted_and_travels_with_the_stop():
    """Tune's Ctrl-C handler logs its "Stop signal received" line as it fires: that is the moment a trial whose run
    then fails on its way out was stopped (:func:`end_running`'s ``failed_since``)."""
    tunes = logging.getLogger("ray.tune.tune")
    with tune_silent() as stop_lines:
        assert stop_lines.stopped_at is None
        tunes.info("Trials did not complete: [t1]")  # not after a stop: no stop noted
        assert stop_lines.stopped_at is None
        before = time.time()
        tunes.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run. ...")
        assert before <= stop_lines.stopped_at <= time.time()
    assert stopped_at(TuneStopped(1234.5)) == 1234.5 and isinstance(TuneStopped(0.0), KeyboardInterrupt)
    assert stopped_at(KeyboardInterrupt()) is None  # a second Ctrl-C: no moment, only RUNNING runs end KILLED


def test_a_fit_stopped_by_ctrl_c_raises_the_moment_tunes_handler_fired():
    """:func:`fit` on a tuner that, as Tune does, installs its own Ctrl-C handler, which logs its stop line and puts
    back the handler it found: Ctrl-C during the fit raises :class:`TuneStopped` at the moment the handler fired, and
    the handler from before the fit is back."""
    before = signal.getsignal(signal.SIGINT)

    class StoppedTuner:
        def fit(self):
            found = signal.getsignal(signal.SIGINT)

            def tunes_handler(signum, frame):
                self.firing = time.time()
                logging.getLogger("ray.tune.tune").warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending")
                self.fired = time.time()
                signal.signal(signal.SIGINT, found)

            signal.signal(signal.SIGINT, tunes_handler)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, on this (the main) thread
            return "results"

    tuner = StoppedTuner()
    with pytest.raises(TuneStopped) as stopped:
        fit(tuner)
    assert tuner.firing <= stopped.value.at <= tuner.fired  # while the handler ran, not when the fit returned
    assert signal.getsignal(signal.SIGINT) is before


def test_tunes_warning_about_unreported_trials_is_dropped_only_after_a_stop():
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    with records(analysis.name) as kept, tune_silent():
        analysis.warning("Failed to fetch metrics for 1 trial(s): before any stop")
        logging.getLogger("ray.tune.tune").warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending")
        analysis.warning("Failed to fetch metrics for 1 trial(s): after the stop")
        analysis.warning("Another warning")
    shown = [r.getMessage() for r in kept]
    assert shown == ["Failed to fetch metrics for 1 trial(s): before any stop", "Another warning"]


def test_a_sigterm_during_a_fit_stops_it_as_ctrl_c_does_and_says_it_was_a_sigterm():
    """A scheduler's SIGTERM reaches Tune as its Ctrl-C (its graceful stop, with the trials' checkpoints saved); the
    stop carries SIGTERM, so the command exits 143; both handlers from before the fit are back."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    class TermedTuner:
        def fit(self):
            found = signal.getsignal(signal.SIGINT)

            def tunes_handler(signum, frame):
                logging.getLogger("ray.tune.tune").warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending")
                signal.signal(signal.SIGINT, found)

            signal.signal(signal.SIGINT, tunes_handler)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            return "results"

    with pytest.raises(TuneStopped) as stopped:
        fit(TermedTuner())
    assert stop_signum(stopped.value) == signal.SIGTERM and stop_signum(TuneStopped(0.0)) == signal.SIGINT
    assert stop_signum(Terminated()) == signal.SIGTERM and stop_signum(KeyboardInterrupt()) == signal.SIGINT
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_tunes_timing_of_its_own_loop_is_dropped_and_its_other_warnings_kept():
    from ray.tune.utils.util import warn_if_slow

    timings = logging.getLogger("ray.tune.utils.util")
    with records(timings.name) as kept:
        with tune_silent():
            timings.warning(warn_if_slow.DEFAULT_MESSAGE.format(name="on_step_begin", duration=0.865))
            timings.warning("Some other warning of Tune's")
        timings.warning(warn_if_slow.DEFAULT_MESSAGE.format(name="on_step_begin", duration=0.865))
    assert [r.getMessage()[:24] for r in kept] == ["Some other warning of Tu", "The `on_step_begin` oper"]


def test_a_failed_copy_of_tunes_state_is_one_line_with_its_error(ray_session, tmp_path):
    """Tune's own checkpoint manager, forced to save (as at a Ctrl-C), copying its staging folder to a storage folder
    that a file stands in place of: the copy fails, and Tune's error comes as one line naming the exception, where
    outside :func:`tune_silent` it carries the traceback."""
    import shutil

    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    with records("ray.tune.execution.experiment_state") as kept:
        for silent in (True, False):
            storage = StorageContext(storage_path=str(tmp_path / str(silent)), experiment_dir_name="s")
            shutil.rmtree(storage.experiment_fs_path)
            Path(storage.experiment_fs_path).write_text("not a folder")
            staging = Path(storage.experiment_driver_staging_path)

            def save(staging=staging):
                staging.mkdir(parents=True, exist_ok=True)
                (staging / "experiment_state.json").write_text("{}")

            manager = _ExperimentCheckpointManager(storage=storage, checkpoint_period=0)
            with tune_silent() if silent else contextlib.nullcontext():
                manager.sync_up_experiment_state(save_fn=save, force=True, wait=True)
    one_line, with_traceback = kept
    assert one_line.exc_info is None and "\n" not in one_line.getMessage()
    assert one_line.getMessage().startswith("Saving experiment state to storage at ")
    assert (
        one_line.getMessage().endswith("Not a directory") and "NotADirectoryError: [Errno 20]" in one_line.getMessage()
    )
    assert with_traceback.exc_info is not None and isinstance(with_traceback.exc_info[1], NotADirectoryError)


def test_a_trials_exit_inside_a_weakref_callback_prints_no_traceback_and_other_faults_still_do():
    # Ray's SIGTERM handler raises SystemExit; landing while a weak reference's callback runs (as after a
    # comparison's cell), Python reports it as "Exception ignored" and runs on. In a trial only other faults are
    # reported
    child = (
        "import os, signal, sys, weakref\n"
        "from raysim.sweep.tune_console import quiet_trial_exit\n"
        "def ray_sigterm_handler(signum, frame): raise SystemExit(1)\n"
        "signal.signal(signal.SIGTERM, ray_sigterm_handler)\n"
        "class Thing: pass\n"
        "class Breaks:\n    def __del__(self): raise ValueError('a real fault')\n"
        "if sys.argv[1] == 'trial': quiet_trial_exit(); quiet_trial_exit()\n"
        "thing = Thing(); ref = weakref.ref(thing, lambda _: os.kill(os.getpid(), signal.SIGTERM)); del thing\n"
        "Breaks(); print('still running')\n"
    )
    for where in ("driver", "trial"):
        done = subprocess.run([sys.executable, "-c", child, where], capture_output=True, text=True, timeout=60)
        assert done.stdout == "still running\n" and "ValueError: a real fault" in done.stderr, done.stderr
        assert ("SystemExit" in done.stderr) == (where == "driver"), done.stderr
