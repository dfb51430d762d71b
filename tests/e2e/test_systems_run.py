"""A run with the virtual clock and capacity tiers through the CLI, as the systems docs show it: MLflow holds the
clock's metrics and the tiered updates per round, and the time-to-accuracy plot."""

from __future__ import annotations

from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.cli import main

CLOCK = ("sim_time_s", "round_sim_s", "stragglers", "dropouts", "participation_rate", "tiered_updates")


def test_a_clocked_tiered_run_logs_the_clock_and_its_time_to_accuracy_plot(ray_session, tracking_uri):
    args = ["run", "fedvpt", "--preset", "quick", "--no-progress", "--backend", "sequential"]
    args += ["--tracking-uri", tracking_uri, "--set", "systems.speed=lognormal:0,1", "--set", "systems.trace=example"]
    args += ["--set", "federation.deadline_s=30", "--set", "federation.stragglers=partial"]
    args += ["--set", "systems.tiers=head,all"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    client = MlflowClient(tracking_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("raysim").experiment_id])
    for key in CLOCK:
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2, 3], key
    clock = sorted(client.get_metric_history(run.info.run_id, "sim_time_s"), key=lambda m: m.step)
    assert 0 < clock[0].value < clock[1].value < clock[2].value
    assert run.data.params["systems.trace"] == "example" and run.data.params["federation.deadline_s"] == "30.0"
    assert run.data.params["systems.tiers"] == "head,all"
    assert "time_to_accuracy.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
