"""``raysim report``: per-method means of the runs' summaries and the figures, from a real MLflow store; runs logged
before summaries were ``summary/<metric>_<stat>`` (``summary.<metric>.<stat>``) still count, and a sweep's report
covers its trials only."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mlflow.entities import Metric, ViewType
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from raysim.cli import main
from raysim.tracking.mlflow import ATTACK, KIND, SWEEP, summary_key, summary_metrics
from raysim.tracking.report import short_labels, write_report


def _summary(final, mean, worst, old: bool) -> list[Metric]:
    stats = {"global_acc": {"final": final, "mean": mean}, "worst_local_acc": {"mean": worst}}
    if old:  # as runs logged them before summaries had a section of their own
        names = {f"summary.{k}.{s}": v for k, by in stats.items() for s, v in by.items()}
    else:
        names = summary_metrics(stats)
    return [Metric(name, value, 0, 10) for name, value in names.items()]


def _store(tmp_path, uri):
    client = MlflowClient(uri)
    experiment = client.create_experiment("cmp", artifact_location=(tmp_path / "a").as_uri())
    runs = {("fedvpt", 0): (40.0, 30.0, 10.0), ("fedvpt", 1): (50.0, 36.0, 20.0), ("sgpt", 0): (60.0, 55.0, 25.0)}
    for (method, seed), (final, mean, worst) in runs.items():
        run = client.create_run(experiment, run_name=f"{method}-s{seed}", tags={"method": method})
        metrics = [Metric("global_acc", final - 10 + r, 1000 + r, r) for r in range(1, 11)]
        client.log_batch(run.info.run_id, metrics=metrics + _summary(final, mean, worst, old=seed == 1))
        client.set_terminated(run.info.run_id)
    unfinished = client.create_run(experiment, run_name="running", tags={"method": "afl"})
    client.log_batch(unfinished.info.run_id, metrics=[Metric("summary/global_acc_final", 99.0, 0, 1)])
    return uri


def _rows(text: str) -> dict[str, list[str]]:
    return {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in text.splitlines()
        if line.startswith(("| f", "| s"))
    }


def test_report_averages_each_method_and_draws_the_figures(tmp_path, tracking_uri):
    uri = _store(tmp_path, tracking_uri)
    result = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", uri, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    # fedvpt's seed-1 run has the old names: both runs count
    assert _rows(result.stdout) == {
        "fedvpt": ["2", "45.00", "33.00", "15.00"],
        "sgpt": ["1", "60.00", "55.00", "25.00"],
    }
    for name in ("report.md", "accuracy_curves.png", "global_vs_worst.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "| fedvpt-s1 | fedvpt | 50.00 | 36.00 | 20.00 |" in (tmp_path / "out" / "report.md").read_text()


def test_a_sweeps_report_covers_its_trials_and_no_report_counts_its_own_run(tmp_path, tracking_uri):
    uri = _store(tmp_path, tracking_uri)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("cmp").experiment_id
    parent = client.create_run(experiment, run_name="sweep", tags={KIND: SWEEP, "method": "fedvpt"}).info.run_id
    for final in (70.0, 80.0):
        trial = client.create_run(experiment, tags={"method": "fedvpt", MLFLOW_PARENT_RUN_ID: parent})
        client.log_batch(trial.info.run_id, metrics=_summary(final, final, 5.0, old=False))
        client.set_terminated(trial.info.run_id)
    client.log_batch(parent, metrics=[Metric("summary/global_acc_final", 99.0, 0, 1)])
    client.set_terminated(parent)
    table, paths = write_report(uri, "cmp", tmp_path / "sweep", parent_run_id=parent)
    assert _rows(table) == {"fedvpt": ["2", "75.00", "75.00", "5.00"]} and all(p.stat().st_size for p in paths)
    attack = client.create_run(experiment, tags={KIND: ATTACK, MLFLOW_PARENT_RUN_ID: trial.info.run_id})
    client.log_batch(attack.info.run_id, metrics=[Metric("auc", 0.5, 0, 0)])
    client.set_terminated(attack.info.run_id)
    everything, _ = write_report(uri, "cmp", tmp_path / "all")
    assert _rows(everything)["fedvpt"][0] == "4"  # the two fedvpt runs and the two trials, not the sweep's run
    assert "| ? |" not in everything  # nor an attack's run


def test_summary_names_have_one_section_and_old_names_still_read():
    names = summary_metrics({"worst_local_acc": {"mean": 1.0, "final": 2.0}})
    assert names == {"summary/worst_local_acc_mean": 1.0, "summary/worst_local_acc_final": 2.0}
    assert all(name.count("/") == 1 for name in names)  # MLflow's charts: one section, "summary"
    assert summary_key("summary/worst_local_acc_mean") == ("worst_local_acc", "mean")
    assert summary_key("summary.worst_local_acc.mean") == ("worst_local_acc", "mean")
    assert summary_key("global_acc") is None and summary_key("bytes_up_total") is None


def test_labels_keep_what_tells_runs_apart():
    names = ["fedvpt-aaaaaa-s0-glyphs62-dirichlet0.5-100c", "fedvpt-bbbbbb-s0-glyphs62-dirichlet0.5-100c"]
    assert short_labels(names) == {names[0]: "aaaaaa", names[1]: "bbbbbb"}
    assert short_labels(["a-b-c", "a-d-e-c"]) == {"a-b-c": "b", "a-d-e-c": "d-e"}
    assert short_labels(["a-b", "a-b"]) == {"a-b": "a-b"} and short_labels(["x"]) == {"x": "x"}


def test_report_errors_are_one_line(tmp_path, tracking_uri):
    uri = _store(tmp_path, tracking_uri)
    missing = CliRunner().invoke(main, ["report", "nope", "--tracking-uri", uri])
    assert missing.exit_code == 2 and "no experiment 'nope'" in missing.stderr and "cmp" in missing.stderr
    no_store = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", f"sqlite:///{tmp_path}/x/m.db"])
    assert no_store.exit_code == 2 and "does not exist" in no_store.stderr
    assert not (tmp_path / "x").exists()
    folder = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", f"sqlite:///{tmp_path}"])
    assert folder.exit_code == 2 and f"sqlite:///{tmp_path} is a folder, not a file" in folder.stderr
    (tmp_path / "junk.db").write_text("not a database")
    junk = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", f"sqlite:///{tmp_path}/junk.db"])
    assert junk.exit_code == 2 and len(junk.stderr.strip().splitlines()) == 1, junk.stderr
    assert f"{tmp_path / 'junk.db'} is not a SQLite database" in junk.stderr
    (tmp_path / "taken").write_text("")
    for out in ("taken", "taken/report"):  # a file where the folder, or a folder above it, would be
        blocked = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", uri, "--out", str(tmp_path / out)])
        assert blocked.exit_code == 2 and len(blocked.stderr.strip().splitlines()) == 1, blocked.stderr
        assert f"--out {tmp_path / out} is not writable (cannot create files in {tmp_path / 'taken'})" in blocked.stderr


def test_a_store_in_a_folder_that_cannot_be_written_is_read(tmp_path, tracking_uri):
    """Reading needs no lock file beside the store: a store shared read-only (here a folder made immutable, which
    binds root too) reports as any other."""
    import shutil
    import subprocess

    _store(tmp_path, tracking_uri)
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(tracking_uri.removeprefix("sqlite:///"), shared / "mlflow.db")
    if subprocess.run(["chattr", "+i", str(shared)], capture_output=True).returncode:
        pytest.skip("chattr cannot make a folder immutable here")
    try:
        uri = f"sqlite:///{shared / 'mlflow.db'}"
        result = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", uri, "--out", str(tmp_path / "out")])
    finally:
        subprocess.run(["chattr", "-i", str(shared)], check=True)
    assert result.exit_code == 0, result.stderr
    assert _rows(result.stdout)["fedvpt"][0] == "2"


def test_a_runs_nan_summary_leaves_it_out_of_its_methods_mean(tmp_path, tracking_uri):
    """A diagnostic without rows to rest on is NaN in one run: the method's cell averages the runs with a number."""
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("nan", artifact_location=(tmp_path / "a").as_uri())
    for seed, worst in enumerate((float("nan"), 20.0)):
        run = client.create_run(experiment, run_name=f"fedvpt-s{seed}", tags={"method": "fedvpt"})
        metrics = [Metric("global_acc", 40.0, 1000, 1)] + _summary(40.0, 30.0 + seed, worst, old=False)
        client.log_batch(run.info.run_id, metrics=metrics)
        client.set_terminated(run.info.run_id)
    table, _ = write_report(tracking_uri, "nan", tmp_path / "out")
    assert _rows(table) == {"fedvpt": ["2", "40.00", "30.50", "20.00"]}


def test_a_store_of_another_program_or_mlflow_and_a_deleted_experiment_are_one_line_and_left_as_they_are(
    tmp_path, tracking_uri
):
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as database:
        database.execute("CREATE TABLE notes (text)")
    older = tmp_path / "older.db"
    uri = _store(tmp_path, tracking_uri)
    older.write_bytes((tmp_path / "mlflow.db").read_bytes())
    with sqlite3.connect(older) as database:
        database.execute("UPDATE alembic_version SET version_num = '0c779009ac13'")
    client = MlflowClient(uri)
    deleted = client.get_experiment_by_name("cmp").experiment_id
    client.delete_experiment(deleted)
    runs = len(client.search_runs([deleted], run_view_type=ViewType.ALL))
    cases = [
        (["report", "cmp", "--tracking-uri", f"sqlite:///{other}"], "is a SQLite database of another program"),
        (["report", "cmp", "--tracking-uri", f"sqlite:///{older}"], "Detected out-of-date database schema"),
        (["report", "cmp", "--tracking-uri", uri], "experiment 'cmp' is deleted in the MLflow store"),
        (["ui", "--experiment", "cmp", "--tracking-uri", uri], "mlflow experiments restore --experiment-id"),
        (["run", "fedavg", "--experiment", "cmp", "--tracking-uri", uri], "or pass another --experiment"),
    ]
    for args, fragment in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert fragment in result.stderr, result.stderr
    with sqlite3.connect(other) as database:  # MLflow added none of its tables
        assert [name for (name,) in database.execute("SELECT name FROM sqlite_master")] == ["notes"]
    assert len(client.search_runs([deleted], run_view_type=ViewType.ALL)) == runs == 4  # the run started none
