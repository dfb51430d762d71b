"""Against one recorded run: the capture replays it and holds exactly what its coordinator received (every tensor,
bit for bit), and each ``raysim attack`` command logs its own MLflow run nested under it."""

from __future__ import annotations

import re
import tempfile
from collections import Counter

import pytest
import torch
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.attacks.capture import capture
from raysim.attacks.membership_attack import membership
from raysim.attacks.recorded import contributors, final_state, recorded_config
from raysim.attacks.shadows import attacked_half, shadow_run, shadow_seed
from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.engine import simulation as simulation_module
from raysim.engine.setup import initial_state, prepare_shards, resolved
from raysim.tracking.participation import PARTICIPATION, load_participation


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


@pytest.mark.parametrize("attack", ["inverting", "april"])
def test_a_reconstruction_is_a_run_nested_under_the_attacked_one(recorded, attack, nested_run):
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


def test_the_participation_record_counts_the_rounds_each_update_was_used(recorded):
    uri, run_id, received = recorded
    counts = Counter(client for kept in received for client in kept)
    with tempfile.TemporaryDirectory() as folder:
        path = MlflowClient(tracking_uri=uri).download_artifacts(run_id, PARTICIPATION, folder)
        assert load_participation(path) == dict(counts)
    assert contributors(uri, run_id) == sorted(counts)


def test_membership_inference_is_a_run_nested_under_the_attacked_one(recorded, nested_run):
    """By default its members are the training rows of the clients the server heard, and only those."""
    uri, run_id, received = recorded
    result = CliRunner().invoke(main, ["attack", "membership", "--run", run_id, "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    run = nested_run(uri, run_id, result.output)
    heard = sorted({client for kept in received for client in kept})
    shards = prepare_shards(recorded_config(uri, run_id))
    assert len(heard) < len(shards.seen_clients())
    assert run.data.metrics["members"] == sum(len(shards.train(c)) for c in heard)
    assert run.data.params["clients"] == "heard"
    config, _, _, shards = initial_state(resolved(recorded_config(uri, run_id)), shards)
    expected = membership(config, final_state(uri, run_id).params, shards, heard).roc.auc  # the attack, here
    assert run.data.metrics["auc"] == pytest.approx(expected)
    assert [f.path for f in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)] == ["roc.png"]


def test_a_shadow_run_never_trains_the_held_out_clients_and_repeats_itself(recorded):
    uri, run_id, received = recorded
    config, _, _, shards = initial_state(*_replayed(uri, run_id))
    heard = sorted({client for kept in received for client in kept})
    held_out = attacked_half(config.federation.seed, heard)
    assert len(held_out) == len(heard) // 2 and set(held_out) <= set(heard)
    first, again = shadow_run(config, shards, held_out, 0), shadow_run(config, shards, held_out, 0)
    assert first.contributions and not set(first.contributions) & set(held_out)
    assert first.config.federation.seed == shadow_seed(config.federation.seed, 0) != config.federation.seed
    for name, tensor in first.params.items():
        assert torch.equal(tensor, again.params[name]), name
    other = shadow_run(config, shards, held_out, 1)
    assert any(not torch.equal(t, other.params[n]) for n, t in first.params.items())


def test_membership_with_shadows_adds_offline_lira_on_the_same_rows(recorded, nested_run):
    uri, run_id, received = recorded
    result = CliRunner().invoke(
        main, ["attack", "membership", "--run", run_id, "--tracking-uri", uri, "--shadows", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "shadow run 2/2" in result.output and "offline LiRA AUC" in result.output
    run = nested_run(uri, run_id, result.output)
    heard = sorted({client for kept in received for client in kept})
    config = recorded_config(uri, run_id)
    shards = prepare_shards(config)
    attacked = attacked_half(config.federation.seed, heard)
    assert run.data.metrics["members"] == sum(len(shards.train(c)) for c in attacked)
    assert (run.data.params["clients"], run.data.params["shadows"]) == ("half heard", "2")
    printed = re.search(r"offline LiRA AUC ([0-9.]+), TPR ([0-9.]+) at 1% FPR", result.output)
    assert printed, result.output  # what it printed is what it logged
    logged = run.data.metrics["lira_auc"], run.data.metrics["lira_tpr_at_1pct_fpr"]
    assert (f"{logged[0]:.3f}", f"{logged[1]:.3f}") == printed.groups()


def test_lira_on_personal_models_is_one_line(recorded):
    uri, run_id, _ = recorded
    args = ["attack", "membership", "--run", run_id, "--tracking-uri", uri, "--model", "personal", "--shadows", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--shadows trains shadow runs without the scored clients" in result.output


def _replayed(uri, run_id):
    config = recorded_config(uri, run_id)
    return resolved(config), prepare_shards(config)
