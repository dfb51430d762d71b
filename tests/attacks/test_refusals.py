"""Bad input and attacks on a channel the run does not send end in one line and exit code 2, before any replay."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from raysim.cli import main
from raysim.config import dump_yaml
from raysim.testing.smoke import smoke_config
from raysim.tracking.mlflow import Tracker

SGD = {"train": {"optimizer": "sgd", "batch_size": 64}}


def recorded_run(uri: str, method: str, *layers: dict) -> str:
    """A run that recorded only its config (as a new run's set-up logs it)."""
    tracker = Tracker(uri)
    run_id = tracker.start("attacks", "recorded", {}, {})
    tracker.log_text(dump_yaml(smoke_config(method, *layers)), "config.yaml")
    tracker.end()
    return run_id


@pytest.mark.parametrize(
    ("method", "layers", "args", "fragment"),
    [
        ("fedv", [SGD], [], "fedv is split learning: its clients send cut-layer activations"),
        ("fedavg", [], [], "inverting reads the gradient off SGD steps, and the run used train.optimizer=adamw"),
        (
            "fedavg",
            [SGD, {"train": {"local_epochs": 2}, "privacy": {"mode": "record", "noise_multiplier": 1, "delta": 1e-5}}],
            [],
            "2 local epochs' steps are clipped and noised",
        ),
        ("fedavg", [SGD, {"privacy": {"secure_aggregation": True}}], [], "sees only the cohort's sum"),
        ("sgpt", [SGD], [], "sgpt's clients read per-row features cached before the run"),
        ("fedavg", [SGD], ["--clients", "1,x"], "--clients '1,x' is not a comma-separated list"),
        ("fedavg", [SGD], ["--clients", "3,1,3"], "--clients '3,1,3' names client 3 twice"),
        ("fedavg", [SGD], ["--round", "9"], "--round 9 is not a round of the run (1 to 2)"),
        ("fedavg", [SGD], ["--refine", "-1"], "--tv and --refine at least 0"),
        ("fedavg", [SGD, {"compression": {"downlink": "qsgd:8"}}], [], "under compression.downlink clients train"),
        (
            "fedavg",
            [SGD, {"federation": {"mode": "async"}, "systems": {"speed": "lognormal:3,0.5"}}],
            [],
            "the run used federation.mode=async",
        ),
    ],
)
def test_refused_inversions_are_one_line(tracking_uri, method, layers, args, fragment):
    run_id = recorded_run(tracking_uri, method, *layers)
    result = CliRunner().invoke(main, ["attack", "inverting", "--run", run_id, "--tracking-uri", tracking_uri, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.output


def test_an_unknown_run_and_a_run_without_its_final_state_are_one_line(tracking_uri):
    unknown = CliRunner().invoke(main, ["attack", "membership", "--run", "nope", "--tracking-uri", tracking_uri])
    assert unknown.exit_code == 2 and "MLflow run nope is not in the store" in unknown.output
    run_id = recorded_run(tracking_uri, "fedavg")
    unfinished = CliRunner().invoke(main, ["attack", "membership", "--run", run_id, "--tracking-uri", tracking_uri])
    assert unfinished.exit_code == 2 and f"run {run_id} has no global_state.safetensors" in unfinished.output
    assert len(unfinished.output.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["smashed", "label-leakage"])
def test_a_split_learning_attack_on_a_method_that_sends_no_features_is_one_line(tracking_uri, command):
    run_id = recorded_run(tracking_uri, "fedavg")
    result = CliRunner().invoke(main, ["attack", command, "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "fedavg is not split learning: its clients send no smashed features" in result.output


def test_bad_split_learning_attack_options_are_one_line():
    bad = CliRunner().invoke(main, ["attack", "label-leakage", "--run", "any", "--step", "0"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "raysim: error: --step '0' is neither a local step (1, 2, ...) nor all"
    ]
    bad = CliRunner().invoke(main, ["attack", "smashed", "--run", "any", "--inversion", "network", "--epochs", "0"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    assert "--epochs and --public-rows must be at least 1" in bad.output


@pytest.mark.parametrize(
    ("method", "fragment"),
    [
        ("fedavg", "fedavg keeps no personalised models; pass --model global"),
        ("ditto", "left no checkpoint in"),
    ],
)
def test_membership_of_personal_models_a_run_does_not_hold_is_one_line(tracking_uri, method, fragment):
    run_id = recorded_run(tracking_uri, method)
    result = CliRunner().invoke(
        main, ["attack", "membership", "--run", run_id, "--tracking-uri", tracking_uri, "--model", "personal"]
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert fragment in result.output


def test_a_feature_mean_attack_on_a_method_that_sends_none_is_one_line(tracking_uri):
    run_id = recorded_run(tracking_uri, "fedvpt")
    result = CliRunner().invoke(main, ["attack", "features", "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "fedvpt's clients send no feature mean; attack fedgcr, fedgc or fedgr" in result.output
