"""Against one recorded run: the capture replays it and holds exactly what its coordinator received (every tensor,
bit for bit), and each ``raysim attack`` command logs its own MLflow run nested under it."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.attacks.capture import capture
from raysim.attacks.recorded import recorded_config
from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.engine import simulation as simulation_module


@pytest.fixture(scope="module")
def recorded(tracked_run):
    """A tracked two-round FedAvg run on the sequential backend (200 clients of 6 rows, 10 a round, one SGD step
    each), and what its server's screening kept each round."""
    layer = {"federation": {"clients": 200, "participation": 0.05}, "train": {"optimizer": "sgd", "batch_size": 64}}
    received = []
    screen = simulation_module.screen

    def spied(*args, **kwargs):
        kept, rejected = screen(*args, **kwargs)
        received.append({u.client_id: u for u in kept})
        return kept, rejected

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulation_module, "screen", spied)
        uri, run_id = tracked_run("fedavg", layer)
    return uri, run_id, received


def test_the_captured_messages_are_what_the_coordinator_received_bit_for_bit(recorded):
    uri, run_id, received = recorded
    config = recorded_config(uri, run_id)
    assert config.resources.backend == "sequential"
    captured = capture(config, 2)
    assert set(captured.updates) == set(received[1])
    for client, sent in received[1].items():
        got = captured.updates[client]
        assert (got.num_samples, got.metrics.keys(), got.extras.keys()) == (
            sent.num_samples,
            sent.metrics.keys(),
            sent.extras.keys(),
        )
        assert list(got.params) == list(sent.params)
        for name, tensor in sent.params.items():
            assert got.params[name].dtype == tensor.dtype
            assert torch.equal(got.params[name], tensor), (client, name)


def test_a_client_the_server_did_not_hear_from_is_one_line(recorded):
    uri, run_id, received = recorded
    absent = next(c for c in range(200) if c not in received[0])
    with pytest.raises(ConfigError, match=f"no update of client {absent} in round 1"):
        capture(recorded_config(uri, run_id), 1, [absent])


def nested_run(uri: str, parent: str, output: str):
    """The attack's run the command's last line names, checked to be nested under ``parent``."""
    run_id = output.strip().splitlines()[-1].split("attack run ")[1].split(",")[0]
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
    return run


@pytest.mark.parametrize("attack", ["inverting", "april"])
def test_a_reconstruction_is_a_run_nested_under_the_attacked_one(recorded, attack):
    uri, run_id, received = recorded
    client = min(received[0])
    args = ["--iterations", "2"] if attack == "inverting" else []
    result = CliRunner().invoke(
        main, ["attack", attack, "--run", run_id, "--tracking-uri", uri, "--clients", str(client), *args]
    )
    if attack == "april":  # a client of several rows: the closed form refuses, in one line
        assert result.exit_code == 2 and "APRIL's closed form inverts an update of one row" in result.output
        return
    assert result.exit_code == 0, result.output
    run = nested_run(uri, run_id, result.output)
    assert {"psnr", "ssim", "labels_recovered", "seconds"} <= set(run.data.metrics)
    files = [f.path for f in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)]
    assert files == [f"client-{client}.png"]


def test_membership_inference_is_a_run_nested_under_the_attacked_one(recorded):
    uri, run_id, _ = recorded
    result = CliRunner().invoke(main, ["attack", "membership", "--run", run_id, "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    run = nested_run(uri, run_id, result.output)
    assert 0.0 <= run.data.metrics["auc"] <= 1.0 and run.data.metrics["members"] > 0
    assert [f.path for f in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)] == ["roc.png"]
