"""What ``raysim compare`` shows while its cells run, in place of Ray Tune's trial tables (which name a cell by a
truncated tuple and show neither its round nor its accuracy).

A Tune callback in the comparison's process: in a terminal, a bar over the cells and one bar per running cell with
its round and latest global accuracy; a line when a cell starts, finishes or fails (the only output in a pipe or a
file, where nothing is redrawn). The cells report each evaluated round to Tune (:class:`RoundsToTune`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ray import tune
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from raysim.engine.callbacks import Callback
from raysim.tracking.comparison import cell_label
from raysim.tracking.progress import format_metrics


class RoundsToTune(Callback):
    """In a cell: each evaluated round's metrics and its number, reported to Tune (no checkpoint)."""

    def after_round(self, round, report) -> bool:
        if report.evaluated:
            tune.report({**report.metrics, "round": round})
        return False


def cell_name(trial) -> str:
    """The trial's cell, ``METHOD/sSEED``."""
    return cell_label(*trial.config["cell"])


class CellProgress(tune.Callback):
    """The cells' progress: ``rounds`` of each cell to run (by :func:`cell_name`), ``finished`` cells already done
    (a resumed comparison)."""

    def __init__(self, rounds: dict[str, int], finished: int = 0, console: Console | None = None):
        self.rounds, self.finished = rounds, finished
        self.cells = len(rounds) + finished
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[str, int] = {}

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
        self.total = self.progress.add_task("", name="cells", total=self.cells, completed=self.finished)

    def __getstate__(self):  # Tune pickles its run config: the live display stays here
        return {**self.__dict__, "console": None, "progress": None, "tasks": {}}

    def _say(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        name = cell_name(trial)
        self.tasks[name] = self.progress.add_task("", name=f"  {name} round", total=self.rounds[name])
        self._say(f"started {name}")

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        task = self.tasks.get(cell_name(trial))
        if task is not None and "round" in result:
            self.progress.update(task, completed=result["round"], description=format_metrics(result))

    def _end(self, trial, outcome: str) -> None:
        task = self.tasks.pop(cell_name(trial), None)
        if task is not None:
            self.progress.remove_task(task)
        self.progress.advance(self.total)
        done = int(self.progress.tasks[self.total].completed)
        self._say(f"{outcome} ({done} of {self.cells} cells done)")

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        accuracy = trial.last_result.get("global_acc")
        shown = f": final global accuracy {accuracy:.2f}" if accuracy is not None else ""
        self._end(trial, f"finished {cell_name(trial)}{shown}")

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        trace = Path(trial.error_file) if trial.error_file else None
        lines = [line for line in trace.read_text().splitlines() if line.strip()] if trace and trace.exists() else []
        shown = f": {lines[-1].strip()} (the trace: {trace})" if lines else ""
        self._end(trial, f"failed {cell_name(trial)}{shown}")

    def on_experiment_end(self, trials, **info) -> None:
        self.progress.stop()
