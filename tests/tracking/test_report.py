"""``raysim report``: per-method means of the runs' summaries and the figures, from a real MLflow store."""

from __future__ import annotations

from click.testing import CliRunner
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from raysim.cli import main


def _store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("cmp", artifact_location=(tmp_path / "a").as_uri())
    runs = {("fedvpt", 0): (40.0, 30.0, 10.0), ("fedvpt", 1): (50.0, 36.0, 20.0), ("sgpt", 0): (60.0, 55.0, 25.0)}
    for (method, seed), (final, mean, worst) in runs.items():
        run = client.create_run(experiment, run_name=f"{method}-s{seed}", tags={"method": method})
        metrics = [Metric("global_acc", final - 10 + r, 1000 + r, r) for r in range(1, 11)]
        metrics += [
            Metric("summary.global_acc.final", final, 0, 10),
            Metric("summary.global_acc.mean", mean, 0, 10),
            Metric("summary.worst_local_acc.mean", worst, 0, 10),
        ]
        client.log_batch(run.info.run_id, metrics=metrics)
        client.set_terminated(run.info.run_id)
    unfinished = client.create_run(experiment, run_name="running", tags={"method": "afl"})
    client.log_batch(unfinished.info.run_id, metrics=[Metric("summary.global_acc.final", 99.0, 0, 1)])
    return uri


def test_report_averages_each_method_and_draws_the_figures(tmp_path):
    uri = _store(tmp_path)
    result = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", uri, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in result.stdout.splitlines()
        if line.startswith(("| f", "| s"))
    }
    assert rows == {"fedvpt": ["2", "45.00", "33.00", "15.00"], "sgpt": ["1", "60.00", "55.00", "25.00"]}  # no afl
    for name in ("report.md", "accuracy_curves.png", "global_vs_worst.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_report_errors_are_one_line(tmp_path):
    uri = _store(tmp_path)
    missing = CliRunner().invoke(main, ["report", "nope", "--tracking-uri", uri])
    assert missing.exit_code == 2 and "no experiment 'nope'" in missing.stderr and "cmp" in missing.stderr
    no_store = CliRunner().invoke(main, ["report", "cmp", "--tracking-uri", f"sqlite:///{tmp_path}/x/m.db"])
    assert no_store.exit_code == 2 and "does not exist" in no_store.stderr
    assert not (tmp_path / "x").exists()
