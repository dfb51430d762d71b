"""What ``raysim compare`` shows while its cells run, on a real Tune run of two tiny cells (one fails): a line per
cell started and ended, a failed cell's error in one line, Tune's own tables silenced, and the environment as it
was; Tune's "Tuner.restore" hint dropped after a Ctrl-C (a comparison resumes by running the same command)."""

from __future__ import annotations

import io
import logging
import os

from ray import tune
from rich.console import Console

from raysim.sweep.cell_progress import CellProgress
from raysim.sweep.tune_console import tune_silent


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
    before = os.environ.get("RAY_AIR_NEW_OUTPUT")
    with tune_silent():
        tuner.fit()
    assert os.environ.get("RAY_AIR_NEW_OUTPUT") == before
    lines = shown.getvalue().splitlines()
    assert lines[:3] == [
        "started fedavg/s1",
        "finished fedavg/s1: final global accuracy 21.00 (4 of 5 cells done)",
        "started broken/s0",
    ]
    assert lines[3].startswith("failed broken/s0: ValueError: the cell's own error (the trace: ")
    assert lines[3].endswith(" (5 of 5 cells done)") and len(lines) == 4
    printed = capfd.readouterr()
    assert "Configuration for experiment" not in printed.out + printed.err  # nor Tune's box, nor its tables


def test_tunes_restore_hint_is_dropped_and_its_other_warnings_kept():
    tunes, kept = logging.getLogger("ray.tune.tune"), []
    handler = logging.Handler()
    handler.emit = kept.append  # Ray's loggers do not propagate to pytest's caplog
    tunes.addHandler(handler)
    try:
        with tune_silent():
            tunes.warning("Experiment has been interrupted, ...\nResume experiment with: Tuner.restore(path=...)")
            tunes.warning("No trial is running and no new trial has been started within the last 60 seconds.")
        tunes.warning("Resume experiment with: Tuner.restore(path=...)")  # outside a comparison, as Tune says it
    finally:
        tunes.removeHandler(handler)
    assert [r.getMessage()[:17] for r in kept] == ["No trial is runni", "Resume experiment"]
