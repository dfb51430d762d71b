"""Ctrl-C on the real console script: the first finishes the round, writes a checkpoint, marks the MLflow run
KILLED and prints the resume command (which then finishes the run); a second exits at once. A sweep or a comparison
stops at once, its runs KILLED, and says how to resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from raysim.testing.console import own_lines
from raysim.tracking import checkpoint as ckpt

RUN = ["run", "fedvpt", "--preset", "quick", "--rounds", "40", "--set", "fedvpt.prompt_length=2"]


def start(tmp_path, *args, command=RUN):
    # Tune saves its state every 10 s or more; each second here, so a stop finds a trial's checkpoint registered sooner
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "raysim.cli", *command, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", *args],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_for_round(process, round: int, timeout_s: float = 180, first: str | None = None) -> list[str]:
    """stderr lines until the plain progress line of ``round`` (printed when stderr is not a terminal), or until
    one that starts with ``first``."""
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        assert line, f"the run ended before round {round}: {''.join(lines)}"
        lines.append(line)
        if line.startswith(first or f"round {round}/40"):
            return lines
    raise AssertionError(f"no round {round} within {timeout_s} s")


def the_run(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (experiment,) = [e for e in client.search_experiments() if e.name == "raysim"]
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def test_first_ctrl_c_checkpoints_and_the_printed_command_resumes(tmp_path):
    process = start(tmp_path, "--workers", "1", "--cpus-per-client", "0.5")
    wait_for_round(process, 2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    last = own_lines(err)[-1]
    match = re.fullmatch(
        r"raysim: stopped after round (\d+) of 40; checkpoint (\S+); resume with: (raysim run .+)", last
    )
    assert match, err
    stopped, folder, command = int(match[1]), match[2], match[3]
    assert "Traceback" not in err
    client, run = the_run(tmp_path)
    assert run.info.status == "KILLED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "global_acc")] == list(range(1, stopped + 1))
    assert ckpt.load(folder).round == stopped and ckpt.load(folder).run_id == run.info.run_id

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "raysim.cli",
            *command.split()[1:],
            "--rounds",
            str(stopped + 1),
            "--backend",
            "sequential",
            "--no-progress",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr
    client, run = the_run(tmp_path)
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "global_acc")] == list(range(1, stopped + 2))


@pytest.mark.parametrize("backend", ["ray", "sequential"])
def test_sigterm_is_a_clean_stop_with_a_checkpoint_and_the_resume_command(tmp_path, backend):
    """What a job scheduler sends (SLURM's time limit, Kubernetes, ``kill``): as the first Ctrl-C, exit 143, and none
    of Ray's native stack trace."""
    process = start(tmp_path, "--backend", backend, "--workers", "1", "--cpus-per-client", "0.5")
    wait_for_round(process, 2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "SIGTERM: finishing this round, then writing a checkpoint (SIGTERM again to stop at once)" in err
    match = re.fullmatch(
        r"raysim: stopped after round (\d+) of 40; checkpoint (\S+); resume with: raysim run fedvpt --resume \S+",
        own_lines(err)[-1],
    )
    assert match, err
    assert "Traceback" not in err and "SIGTERM received" not in err and "PC: @" not in err
    client, run = the_run(tmp_path)
    assert run.info.status == "KILLED"
    assert ckpt.load(match[2]).round == int(match[1]) >= 2


@pytest.mark.parametrize(
    "signum, code, line", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
def test_second_signal_stops_at_once(tmp_path, signum, code, line):
    process = start(tmp_path, "--backend", "sequential", "--set", "train.local_epochs=2000")  # a round of ~30 s
    wait_for_round(process, 0, first="fedvpt | synthetic")  # the headline: the loop is about to run round 1
    time.sleep(1.0)
    process.send_signal(signum)
    time.sleep(0.5)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code
    assert own_lines(err)[-1] == f"raysim: {line}" and "Traceback" not in err
    client, run = the_run(tmp_path)  # stopped in round 1: a round that finished would have logged and checkpointed
    assert run.info.status == "KILLED" and not client.get_metric_history(run.info.run_id, "global_acc")
    assert not list(tmp_path.glob("checkpoints/*/round-*"))


SPACE = "fixed: {federation.rounds: 40}\nspace:\n  fedvpt.prompt_length: {choice: [1, 2]}\n"
SWEEP = ["tune", "fedvpt", "--space", "SPACE", "--num-samples", "2", "--name", "s", "--scheduler", "fifo"]
COMPARISON = ["compare", "fedvpt", "fedavg", "--seeds", "1", "--rounds", "40", "--backend", "sequential"]
QUICK_POOL = ["--preset", "quick", "--workers", "1", "--cpus-per-client", "0.5"]


@pytest.mark.parametrize(
    "command, experiment, stopped",
    [
        (SWEEP, "s", "raysim: stopped sweep s; resume with: raysim tune --resume TMP/tune/s"),
        (
            COMPARISON,
            "compare-fedvpt-fedavg-quick",
            "raysim: stopped comparison compare-fedvpt-fedavg-quick with 0 of 2 cells done; run the same command to "
            "resume",
        ),
    ],
    ids=["tune", "compare"],
)
def test_ctrl_c_stops_a_sweep_or_comparison_with_its_runs_killed_and_says_how_to_resume(
    tmp_path, command, experiment, stopped
):
    """Tune's own handler would end the fit quietly and return the trials so far as if all had run (a sweep's best
    of half its budget; a comparison going on to its next method). raysim stops instead: exit 130, its own run and
    its trials' or cells' runs KILLED, no best trial, and the command that resumes it."""
    (tmp_path / "space.yaml").write_text(SPACE)
    command = [str(tmp_path / "space.yaml") if a == "SPACE" else a for a in command]
    process = start(tmp_path, *QUICK_POOL, command=command)
    wait_for_round(process, 0, first="started ")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")

    def runs():
        return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])

    deadline = time.monotonic() + 120
    while len(runs()) < 2 and time.monotonic() < deadline:  # its own run and a trial's or a cell's are open
        time.sleep(0.5)
    open_runs = {r.info.run_id for r in runs()}
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert own_lines(err)[-1] == stopped.replace("TMP", str(tmp_path)), err
    assert "Traceback" not in err and "Tuner.restore" not in err
    assert "Stop signal received" not in err and "Trials did not complete" not in err  # Tune's lines for the stop
    # the runs open at Ctrl-C end KILLED (a trial that opens its run in the moments before the process exits may
    # leave it RUNNING; a resumed comparison ends it, see end_stopped_cells)
    assert len(open_runs) >= 2 and {r.info.status for r in runs() if r.info.run_id in open_runs} == {"KILLED"}
    assert not (tmp_path / "tune" / "s" / "best.yaml").exists()


def test_a_comparison_stopped_while_tuning_resumes_that_tuning(tmp_path):
    """A comparison's Ctrl-C during a method's tuning keeps that sweep: the same command resumes it (the same sweep
    run, its trial's run continued from its checkpoint) instead of tuning the method anew."""
    command = [*COMPARISON, "--tune-budget", "1"]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")

    def trial_rounds():  # fedvpt's one trial's run id and the rounds it logged, once it has a Tune checkpoint
        found = client.get_experiment_by_name("compare-fedvpt-fedavg-quick-tuning")
        query = "tags.`raysim.trial` != '' and tags.method = 'fedvpt'"  # not fedavg's, which follows it
        runs = client.search_runs([found.experiment_id], query) if found else []
        if len(runs) != 1 or not list(tmp_path.glob("tune/*/*/checkpoint_*")):
            return None, []
        return runs[0].info.run_id, [m.step for m in client.get_metric_history(runs[0].info.run_id, "global_acc")]

    def tune_names_a_checkpoint() -> bool:  # Tune keeps a trial's checkpoints in its state as hex-encoded pickles
        try:  # a state file Tune replaces while it is read counts as not yet
            states = sorted(tmp_path.glob("tune/*/experiment_state-*.json"), key=lambda path: path.stat().st_mtime)
            return bool(states) and b"checkpoint_00".hex() in states[-1].read_text()
        except OSError:
            return False

    def stop_once(process, first: str) -> tuple[str, list[int], str]:
        """SIGINT once the trial has logged three rounds after the line starting with ``first`` and Tune's own state
        names one of its checkpoints: a checkpoint on disk that Tune has not registered restarts the trial anew, in
        a new run (Tune saves its state each second here, see ``start``)."""
        shown = wait_for_round(process, 0, first=first)
        past, deadline = max(trial_rounds()[1], default=0), time.monotonic() + 180
        while time.monotonic() < deadline and (
            max(trial_rounds()[1], default=0) <= past + 2 or not tune_names_a_checkpoint()
        ):
            time.sleep(0.5)
        run_id, rounds = trial_rounds()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 130 and "Traceback" not in err, err
        return run_id, rounds, "".join(shown) + out + err  # stdout too: where a trial's prints would show

    trial, before, err = stop_once(start(tmp_path, *QUICK_POOL, command=command), "started trial 1 of 1")
    assert own_lines(err)[-1] == (
        "raysim: stopped comparison compare-fedvpt-fedavg-quick while tuning fedvpt; run the same command to resume "
        "(the methods tuned so far keep their values; fedvpt's tuning resumes from its trials' checkpoints)"
    ), err
    (folder,) = json.loads((tmp_path / "compare" / "compare-fedvpt-fedavg-quick" / "tuning.json").read_text()).values()

    again, after, err = stop_once(start(tmp_path, *QUICK_POOL, command=command), "resuming the tuning of")
    assert f"resuming the tuning of fedvpt in {folder}" in err and "tuning fedvpt:" not in err, err
    assert "Restored on" not in err, err  # Tune's line from the restored trial's process: the resume says it
    assert again == trial and sorted(set(after)) == list(range(1, max(after) + 1)) and max(after) > max(before)
    tuning = client.get_experiment_by_name("compare-fedvpt-fedavg-quick-tuning").experiment_id
    assert len(client.search_runs([tuning], "tags.`raysim.kind` = 'sweep'")) == 1  # one sweep, resumed
