"""What ``raysim compare`` and ``raysim tune`` show while their runs go, in place of Ray Tune's trial tables (which
name a run by a truncated tuple or a trial id, show neither its round nor its accuracy, and fill a log with a
table every 30 s).

A Tune callback in the command's process: in a terminal, a bar over the runs and one bar per running run with its
round and latest metrics; a line when a run starts, finishes, is stopped by the scheduler or fails (the only output
in a pipe or a file, where nothing is redrawn). The runs report each evaluated round to Tune (:class:`RoundsToTune`; a
sweep's trials with their checkpoints).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ray import tune
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from raysim.engine.callbacks import Callback
from raysim.tracking.comparison import cell_label
from raysim.tracking.progress import format_metrics


class RoundsToTune(Callback):
    """Each evaluated round's metrics and its number, reported to Tune (evaluated rounds carry the accuracy Tune
    ranks by). A sweep's trials (``checkpoints=True``) send the round's checkpoint too, and the MLflow run id (the
    checkpoint folder's parent), so a scheduler can stop a trial and a restored sweep resumes it; a comparison's
    cells resume from MLflow instead."""

    def __init__(self, checkpoints: bool = False):
        self.checkpoints = checkpoints

    def after_round(self, round, report) -> bool:
        if report.evaluated:
            metrics, checkpoint = {**report.metrics, "round": round}, None
            if self.checkpoints:
                folder = Path(report.checkpoint)
                metrics["run_id"], checkpoint = folder.parent.name, tune.Checkpoint.from_directory(str(folder))
            tune.report(metrics, checkpoint=checkpoint)
        return False


def trial_name(trial_id: str) -> str:
    """``trial N`` for Tune's trial id ``..._0000{N-1}``: what a sweep's lines and its best trial call it."""
    return f"trial {int(trial_id.rsplit('_', 1)[1]) + 1}"


def metric_words(metric: str) -> str:
    """``global accuracy`` for ``global_acc``, ``train loss`` for ``train_loss``."""
    return metric.replace("_acc", " accuracy").replace("_", " ")


class TrialProgress(tune.Callback):
    """The display over ``total`` runs called ``noun`` (``finished`` of them done before this fit), each ending with
    its last ``metric``. Subclasses say what a run is called (:meth:`name`, :meth:`opening`) and how many rounds it
    has."""

    noun = "runs"

    def __init__(self, total: int, finished: int = 0, metric: str = "global_acc", console: Console | None = None):
        self.total, self.finished, self.metric, self.console = total, finished, metric, console
        self.failed = 0
        self.progress: Progress | None = None
        self.tasks: dict[str, int] = {}

    def name(self, trial) -> str:
        raise NotImplementedError

    def rounds(self, trial) -> int:
        raise NotImplementedError

    def opening(self, trial) -> str:
        """The line a run starts with."""
        return f"started {self.name(trial)}"

    def setup(self, **info) -> None:
        self.console = self.console or Console(file=sys.stderr)
        self.progress = Progress(
            TextColumn("{task.fields[name]}"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self.progress.start()
        self.bar = self.progress.add_task("", name=self.noun, total=self.total, completed=self.finished)

    def __getstate__(self):  # Tune pickles its run config: the live display stays here
        return {**self.__dict__, "console": None, "progress": None, "tasks": {}}

    def _say(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        name = self.name(trial)
        self.tasks[name] = self.progress.add_task("", name=f"  {name} round", total=self.rounds(trial))
        self._say(self.opening(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        task = self.tasks.get(self.name(trial))
        if task is not None and "round" in result:
            self.progress.update(task, completed=result["round"], description=format_metrics(result))

    def _end(self, trial, outcome: str) -> None:
        task = self.tasks.pop(self.name(trial), None)
        if task is not None:
            self.progress.remove_task(task)
        self.progress.advance(self.bar)
        done = int(self.progress.tasks[self.bar].completed)
        failed = f", {self.failed} failed" if self.failed else ""
        self._say(f"{outcome} ({done} of {self.total} {self.noun} done{failed})")

    def _value(self, result: dict[str, Any]) -> str:
        value = result.get(self.metric)
        return f"{metric_words(self.metric)} {value:.2f}" if value is not None else "no evaluation"

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        result = trial.last_result or {}
        rounds, reached = self.rounds(trial), result.get("round")
        if reached is not None and reached < rounds:  # the scheduler (ASHA) stopped it
            self._end(trial, f"stopped {self.name(trial)} at round {reached} of {rounds}: {self._value(result)}")
        else:
            self._end(trial, f"finished {self.name(trial)}: final {self._value(result)}")

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.failed += 1
        trace = Path(trial.error_file) if trial.error_file else None
        lines = [line for line in trace.read_text().splitlines() if line.strip()] if trace and trace.exists() else []
        shown = f": {lines[-1].strip()} (the trace: {trace})" if lines else ""
        self._end(trial, f"failed {self.name(trial)}{shown}")

    def on_experiment_end(self, trials, **info) -> None:
        self.progress.stop()


class CellProgress(TrialProgress):
    """A comparison's cells, ``METHOD/sSEED``: ``rounds`` of each cell to run, ``finished`` cells already done (a
    resumed comparison)."""

    noun = "cells"

    def __init__(self, rounds: dict[str, int], finished: int = 0, console: Console | None = None):
        super().__init__(len(rounds) + finished, finished, console=console)
        self.rounds_of = rounds

    def name(self, trial) -> str:
        return cell_label(*trial.config["cell"])

    def rounds(self, trial) -> int:
        return self.rounds_of[self.name(trial)]


class SweepProgress(TrialProgress):
    """A sweep's trials, :func:`trial_name`, each opening with its sampled values; every
    trial runs ``rounds`` unless the scheduler stops it. A restored sweep counts the trials it had finished."""

    noun = "trials"

    def __init__(self, samples: int, rounds: int, metric: str, console: Console | None = None):
        super().__init__(samples, metric=metric, console=console)
        self.rounds_each = rounds
        self.counted = False

    def name(self, trial) -> str:
        return trial_name(trial.trial_id)

    def rounds(self, trial) -> int:
        return self.rounds_each

    def opening(self, trial) -> str:
        values = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.config.items())
        return f"started {self.name(trial)} of {self.total}: {values}"

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        if not self.counted:  # a restored sweep's earlier trials are TERMINATED before any trial of this fit starts
            self.counted = True
            earlier = sum(t.status == "TERMINATED" for t in trials)
            self.progress.update(self.bar, completed=earlier)
        super().on_trial_start(iteration, trials, trial, **info)
