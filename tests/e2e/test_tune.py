"""``raysim tune`` end to end on the real Ray Tune: trials are MLflow runs nested under the sweep's own run (which
holds the report of its trials), the printed command reproduces the best trial's metrics and name, a finished
sweep restores, a sweep's name and folder serve one sweep at a time, and bad input stops before any trial."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.base.sole_runner import sole_runner
from raysim.cli import main
from raysim.sweep import tune as sweeping
from raysim.sweep.space import SearchSpace
from raysim.testing.console import own_lines

SPACE = (
    "fixed: {federation.rounds: 3}\nspace:\n  fedvpt.prompt_length: {choice: [1, 2]}\n"
    "  train.lr: {loguniform: [1.0e-3, 1.0e-2]}\n"
)
SMALL = ["--preset", "quick", "--workers", "1", "--cpus-per-client", "0.5"]


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return str(path)


def test_sweep_nests_each_trial_under_its_run_and_its_best_command_reproduces_it(
    ray_session, tmp_path, tracking_uri, space, capfd
):
    sweep = ["tune", "fedvpt", "--space", space, "--num-samples", "2", "--name", "s1", "--tracking-uri", tracking_uri]
    sweep += SMALL
    result = CliRunner().invoke(main, sweep)
    assert result.exit_code == 0, result.output + result.stderr
    best = re.search(
        r"best trial: (trial \d), global_acc (\S+) \(last-10 mean (\S+), which ranks\) with .* \(MLflow run (\w+);",
        result.stdout,
    )
    command = re.search(r"reproduce it: raysim run fedvpt --preset (\S+)", result.stdout)
    assert best and command, result.stdout
    # the trials one line each as they start and end; none of Tune's tables, checkpoint lines or warnings
    shown = result.stdout + result.stderr + "".join(capfd.readouterr())
    assert "started trial 1 of 2: fedvpt.prompt_length=" in shown
    # ASHA stops the second trial early when it trails the first at a milestone: which happens depends on timing
    assert re.search(r"(finished trial 2: final global accuracy|stopped trial 2 at round \d of 3:) ", shown), shown
    assert not re.search("Trial status|Checkpoint successfully created|WARNING", shown), shown
    ended = re.search(rf"finished {best[1]}: final global accuracy (\S+) ", shown)  # the best line names its trial
    assert ended and float(ended[1]) == pytest.approx(float(best[2]), abs=0.006)
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("s1").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("raysim.kind") == "sweep"]
    trials = [r for r in runs if r is not parent]
    assert len(trials) == 2 and {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    for run in trials:  # ASHA may stop one early: it is then KILLED and tagged, never left RUNNING
        assert run.info.status == "FINISHED" or run.data.tags.get("raysim.tune") == "stopped early by the scheduler"
        assert re.fullmatch(r"fedvpt-[0-9a-f]{6}-s0-synthetic-dirichlet1-20c", run.info.run_name)
        assert (
            run.inputs.dataset_inputs and run.data.tags["mlflow.source.name"] == parent.data.tags["mlflow.source.name"]
        )
    assert client.get_run(best[4]).info.status == "FINISHED"
    # the sweep's own run: its description, its space, the best trial and the report of its trials
    assert parent.info.run_name == "s1" and parent.info.status == "FINISHED"
    assert parent.data.tags["mlflow.note.content"].startswith(
        "raysim tune fedvpt: 2 trials sampling fedvpt.prompt_length choice [1, 2], train.lr loguniform [0.001, 0.01]"
    )
    assert parent.data.tags["raysim.best_run_id"] == best[4] and parent.data.tags["mlflow.source.name"]
    assert parent.data.params["space.train.lr"] == "loguniform [0.001, 0.01]" and parent.inputs.dataset_inputs
    assert parent.data.metrics["summary/best_global_acc"] == pytest.approx(float(best[2]), abs=5e-5)
    # ranked by the last-10 mean, as the trial's run computed it (its summary) and as no finished trial beats
    ranked = {r.info.run_id: r.data.metrics["summary/global_acc_mean"] for r in trials if r.info.status == "FINISHED"}
    assert ranked[best[4]] == pytest.approx(float(best[3]), abs=5e-5) == max(ranked.values())
    assert parent.data.metrics["summary/best_global_acc_mean"] == pytest.approx(float(best[3]), abs=5e-5)
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {
        "report.md",
        "accuracy_curves.png",
        "global_vs_worst.png",
    }
    report = Path(client.download_artifacts(parent.info.run_id, "report.md", str(tmp_path))).read_text()
    assert client.get_run(best[4]).info.run_name in report

    again = CliRunner().invoke(
        main, ["run", "fedvpt", "--preset", command[1], "--tracking-uri", tracking_uri, "--no-progress"]
    )
    assert again.exit_code == 0, again.stderr
    (rerun,) = client.search_runs([client.get_experiment_by_name("raysim").experiment_id])
    assert rerun.data.metrics["global_acc"] == pytest.approx(float(best[2]), abs=5e-5)
    assert rerun.info.run_name == client.get_run(best[4]).info.run_name  # the same config, the same name

    # a trial's run left RUNNING by a killed sweep (its trial had no checkpoint yet) ends KILLED when the sweep resumes
    left = client.create_run(parent.info.experiment_id, tags={"raysim.sweep": "s1"}).info.run_id
    restored = CliRunner().invoke(main, ["tune", "--resume", str(tmp_path / "tune" / "s1")])
    assert restored.exit_code == 0, restored.stderr
    assert f"MLflow run {best[4]}" in restored.stdout  # a finished sweep restores with the same best trial
    assert client.get_run(left).info.status == "KILLED"
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"

    # a sweep killed before Tune saved its state cannot be restored: abandoning it ends its runs (a comparison then
    # tunes the method anew), and leaves an ended run as it was
    record = json.loads((tmp_path / "tune" / "s1" / "sweep.json").read_text())
    killed = client.create_run(parent.info.experiment_id).info.run_id
    (tmp_path / "tune" / "s2").mkdir()
    (tmp_path / "tune" / "s2" / "sweep.json").write_text(json.dumps({**record, "name": "s2", "parent_run_id": killed}))
    trial = client.create_run(parent.info.experiment_id, tags={"raysim.sweep": "s2"}).info.run_id
    sweeping.abandon(str(tmp_path / "tune" / "s2"))
    assert client.get_run(killed).info.status == client.get_run(trial).info.status == "KILLED"
    assert client.get_run(left).info.status == "KILLED" and client.get_run(best[4]).info.status == "FINISHED"

    # a second sweep of the same name would write into the first's Tune folder: it stops before it opens a run
    taken = CliRunner().invoke(main, sweep)
    assert taken.exit_code == 2 and len(own_lines(taken.stderr)) == 1, taken.stderr
    assert f"sweep 's1' exists ({tmp_path / 'tune' / 's1'}); resume it with: raysim tune --resume" in taken.stderr
    # and while one process runs (or resumes) the sweep, a second resume stops at once
    with sole_runner(tmp_path / "tune" / "s1", "the first", "resume it"):
        second = CliRunner().invoke(main, ["tune", "--resume", str(tmp_path / "tune" / "s1")])
    assert second.exit_code == 2 and len(own_lines(second.stderr)) == 1, second.stderr
    assert f"sweep 's1' is running in process {os.getpid()}" in second.stderr
    in_s1 = client.search_runs([client.get_experiment_by_name("s1").experiment_id])
    assert len(in_s1) == len(runs) + 3  # left, and the abandoned sweep's two


BAD = [
    (["--metric", "accuracy"], "--metric 'accuracy' is not reported by fedvpt; valid metrics: avg_acc"),
    (["--metric", "unseen_acc"], "--metric 'unseen_acc': the trials would never report it, as their config holds out"),
    (["--metric", "privacy_epsilon"], "never report it, as their config runs without differential privacy"),
    (["--space", "SPACE:space:\n  federation.rounds: {choice: [2, 4]}\n"], "'federation.rounds' cannot be sampled"),
    (["--space", "SPACE:space:\n  tracking.experiment: {choice: [a]}\n"], "'tracking.experiment' cannot be sampled"),
    (
        ["--space", "SPACE:fixed: {train.lr: 0.01}\nspace:\n  train.lr: {choice: [0.1]}\n"],
        "key 'train.lr' is both fixed and sampled",
    ),
    (["--set", "data.s=3"], "data.s is the pathological partition's, and the partition here is dirichlet"),
    (["--mode", "best"], "--mode 'best' must be 'max' or 'min'"),
    (["--scheduler", "pbt"], "--scheduler 'pbt' is not one of asha, fifo"),
    (["--num-samples", "0"], "--num-samples 0 must be at least 1"),
    (["--name", ""], "--name '' is empty; give a value or leave --name out"),
    (["--name", "../../escape"], "--name '../../escape' is a path; give a plain name"),
    (["--max-concurrent", "3"], "--max-concurrent 3 trials need 3 x 1.5 CPU, and the cluster hosts 1"),
    (["--space", "SPACE:space:\n  fedvpt.prompt_lenght: {choice: [1]}\n"], "space key 'fedvpt.prompt_lenght'"),
    (["--space", "SPACE:space:\n  train.lr: {uniform: [0.1, 0.01]}\n"], "uniform bounds [0.1, 0.01] need low < high"),
    (
        ["--space", "SPACE:space:\n  data.alpha: {choice: [0.1, 1]}\n"],
        "space key 'data.alpha' changes the clients' data",
    ),
    (
        ["--space", "SPACE:space:\n  resources.cpus_per_client: {choice: [0.5, 1.0]}\n"],
        "space key 'resources.cpus_per_client' cannot be sampled: resources.* stay the same for every trial",
    ),
    (["--space", "/nope/space.yaml"], "search space file /nope/space.yaml does not exist"),
    (["--space", "/proc/self/mem"], "search space file /proc/self/mem cannot be read (Input/output error)"),
    (["--resume", "/nope/sweep"], "--resume '/nope/sweep' is not a raysim sweep folder"),
    (["--resume", "/nope/sweep", "--rounds", "3"], "--resume finishes the sweep as it was planned; drop --rounds"),
    (["--resume", "/nope/sweep", "--num-samples", "9"], "--resume finishes the sweep as it was planned; drop --num"),
]


def test_a_name_another_process_takes_after_the_plan_is_refused_under_the_lock(
    ray_session, tmp_path, tracking_uri, space, monkeypatch
):
    """Two `raysim tune --name N` started together both pass the plan's check; the second to take the lock stops
    before it opens a run, and one that finds the lock held is told to wait or pick another --name."""
    planned = sweeping.plan

    def taken_meanwhile(*args):
        found = planned(*args)
        sweeping.save_sweep(found)  # the other process took the lock, saved its sweep and let go
        return found

    command = ["tune", "fedvpt", "--space", space, "--name", "s9", "--tracking-uri", tracking_uri, *SMALL]
    with monkeypatch.context() as patch:
        patch.setattr(sweeping, "plan", taken_meanwhile)
        second = CliRunner().invoke(main, command)
    assert second.exit_code == 2 and len(own_lines(second.stderr)) == 1, second.stderr
    assert f"sweep 's9' exists ({tmp_path / 'tune' / 's9'}); resume it with" in second.stderr
    assert MlflowClient(tracking_uri).get_experiment_by_name("s9") is None  # no run opened

    with sole_runner(tmp_path / "tune" / "s10", "the first", "resume it"):  # the other process still holds it
        held = CliRunner().invoke(main, [*command[:5], "s10", *command[6:]])
    assert held.exit_code == 2 and len(own_lines(held.stderr)) == 1, held.stderr
    assert f"sweep 's10' is running in process {os.getpid()}" in held.stderr
    assert held.stderr.rstrip().endswith("; or give this one another --name")


def test_a_sweep_stopped_before_tune_saved_its_state_is_refused_in_one_line(tracking_uri, tmp_path, monkeypatch):
    """Killed between writing sweep.json and Tune's first save: nothing to restore (Tune would raise on tuner.pkl)."""
    sweep = sweeping.Sweep(
        "fedvpt", "s", [], [{"tracking": {"tracking_uri": tracking_uri, "experiment": "s"}}], SearchSpace("x", {}, {}),
        "global_acc", "max", 1, 1, "fifo", str(tmp_path / "tune"),
    )  # fmt: skip
    folder = sweeping.save_sweep(sweep)
    with sole_runner(folder, "sweep 's'", "resume it"):  # still running (reading its data): named, not abandoned
        running = CliRunner().invoke(main, ["tune", "--resume", str(folder)])
    assert running.exit_code == 2 and len(own_lines(running.stderr)) == 1
    assert own_lines(running.stderr)[0].startswith(f"raysim: error: sweep 's' is running in process {os.getpid()} (")
    monkeypatch.chdir(tmp_path)  # a folder given relative to here, as the docs' example gives it
    result = CliRunner().invoke(main, ["tune", "--resume", "tune/s"])
    assert result.exit_code == 2 and own_lines(result.stderr) == [
        f"raysim: error: sweep s stopped before Ray Tune saved its state, so it cannot be resumed; remove {folder} "
        "and start it again with its command, or start it with another --name"
    ]


def test_a_split_learning_server_given_cpus_is_refused_in_a_sweep(tmp_path):
    result = CliRunner().invoke(
        main, ["tune", "fedv", "--set", "resources.server_cpus=1", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    )
    assert result.exit_code == 2 and "fedv's server runs inside each trial's placement group" in result.stderr


def test_a_sweep_of_runs_raysim_run_refuses_is_refused_before_its_store_is_touched(tmp_path):
    """What a run checks against its data before it writes anything (a partition that gives clients no type, for a
    method that reports per type) is checked before any trial: not once per trial, after the sweep's run opened."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = CliRunner().invoke(main, ["tune", "fedgcr", "--partition", "dirichlet", "--tracking-uri", uri])
    assert result.exit_code == 2 and len(own_lines(result.stderr)) == 1, result.stderr
    assert "fedgcr reports sigma_type and cluster_acc per client type, and the partition 'dirichlet'" in result.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "tune").exists()


@pytest.mark.parametrize("extra, fragment", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_sweep_input_is_one_line_exit_2_before_any_trial(ray_session, tmp_path, space, extra, fragment):
    if extra[0] == "--space" and extra[1].startswith("SPACE:"):
        (tmp_path / "bad.yaml").write_text(extra[1][len("SPACE:") :])
        extra = ["--space", str(tmp_path / "bad.yaml")]
    if extra[0] == "--resume":
        result = CliRunner().invoke(main, ["tune", *extra])
    else:
        args = ["tune", "fedvpt", *extra] + ([] if "--space" in extra else ["--space", space])
        result = CliRunner().invoke(main, [*args, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", *SMALL])
    assert result.exit_code == 2, result.output + result.stderr
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("raysim: error: ") and fragment in lines[0], result.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "tune").exists()


def test_a_sweep_tune_gives_up_on_ends_in_one_line_with_its_runs_ended(ray_session, tmp_path, space, monkeypatch):
    """Tune's own error (its trials killed for memory, a lost node) after a trial opened its run: one line, exit 1,
    the resume command, the trial's run KILLED and the sweep's FAILED, not Tune's traceback."""
    from ray.tune.error import TuneError

    uri = f"sqlite:///{tmp_path}/mlflow.db"

    def killed(sweep, resume_path=None):
        config = sweep.trial_config({})
        client = MlflowClient(config.tracking.resolved_uri)
        experiment = client.get_experiment_by_name(config.tracking.experiment).experiment_id
        client.create_run(experiment, tags={sweeping.SWEEP_TAG: sweep.name})  # a trial's, its process gone
        raise TuneError("Trials did not complete: [_trial_00000]\nthe actor died unexpectedly (OOM)")

    monkeypatch.setattr(sweeping, "run_sweep", killed)
    result = CliRunner().invoke(
        main, ["tune", "fedvpt", "--space", space, "--name", "k", "--tracking-uri", uri, *SMALL]
    )
    assert result.exit_code == 1 and own_lines(result.stderr)[-1] == (
        "raysim: error: sweep k stopped (TuneError: the actor died unexpectedly (OOM)); resume with: raysim tune "
        f"--resume {tmp_path / 'tune' / 'k'}"
    ), result.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("k").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FAILED", "KILLED"]
