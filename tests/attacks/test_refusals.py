"""Bad input and attacks on a channel the run does not send end in one line and exit code 2, before any replay."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from raysim.attacks.membership_cli import refuse_non_members
from raysim.base.errors import ConfigError
from raysim.cli import main
from raysim.config import dump_yaml
from raysim.testing.smoke import smoke_config
from raysim.tracking.mlflow import Tracker
from raysim.tracking.participation import save_participation

SGD = {"train": {"optimizer": "sgd", "batch_size": 64}}


def recorded_run(uri: str, method: str, *layers: dict, reported: int = 2) -> str:
    """A run that recorded its config (as a new run's set-up logs it) and the reports of its first ``reported``
    rounds (their ``round_time_s``), nothing else."""
    tracker = Tracker(uri)
    run_id = tracker.start("attacks", "recorded", {}, {})
    tracker.log_text(dump_yaml(smoke_config(method, *layers)), "config.yaml")
    for round in range(1, reported + 1):
        tracker.log_metrics({"round_time_s": 1.0}, step=round)
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
        ("moon", [SGD], [], "moon's clients train with their own local update, which a reconstruction does not model"),
        ("fedsam", [SGD], [], "trains as FedAvg does: fedavg, fedprox, fedvpt, fedvpt-d, head-tune"),
        ("fedavg", [SGD], ["--clients", "1,x"], "--clients '1,x' is not a comma-separated list"),
        ("fedavg", [SGD], ["--clients", "3,1,3"], "--clients '3,1,3' names client 3 twice"),
        ("fedavg", [SGD], ["--round", "9"], "--round 9 is not a round of the run (1 to 2)"),
        ("fedavg", [SGD], ["--clients", "2,99"], "--clients names client 99, and the run has clients 0 to 5"),
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


def test_april_names_itself_in_the_refusals_it_shares_with_inverting(tracking_uri):
    run_id = recorded_run(tracking_uri, "fedavg")  # AdamW
    result = CliRunner().invoke(main, ["attack", "april", "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "april reads the gradient off SGD steps, and the run used train.optimizer=adamw" in result.output


@pytest.mark.parametrize("method", ["fedvpt", "head-tune"])
def test_april_on_a_method_that_does_not_train_the_embeddings_is_one_line_before_any_replay(tracking_uri, method):
    run_id = recorded_run(tracking_uri, method, SGD)
    result = CliRunner().invoke(main, ["attack", "april", "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    expected = f"{method}'s clients train no vit.patch_embed.proj.weight (only full fine-tuning sends them: fedavg)"
    assert len(lines) == 1 and lines[0].endswith(expected), result.output


@pytest.mark.parametrize(
    ("reported", "message"),
    [
        (1, "reported 1 of its 2 rounds, so its server received no round 2; pass --round 1 to 1"),
        (0, "reported 0 of its 2 rounds, so its server received no round 2; attack a run that finished a round"),
    ],
)
def test_a_round_a_stopped_run_never_reached_is_one_line_before_any_replay(tracking_uri, reported, message):
    run_id = recorded_run(tracking_uri, "fedavg", SGD, reported=reported)
    args = ["attack", "inverting", "--run", run_id, "--tracking-uri", tracking_uri, "--round", "2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and result.output.strip().splitlines() == [f"raysim: error: run {run_id} {message}"]


def test_an_asynchronous_run_is_refused_as_such_whatever_rounds_it_reported(tracking_uri):
    """An asynchronous run logs its server versions as rounds: the refusal names the mode, not the rounds."""
    layers = [SGD, {"federation": {"mode": "async"}, "systems": {"speed": "lognormal:3,0.5"}}]
    run_id = recorded_run(tracking_uri, "fedavg", *layers, reported=0)
    result = CliRunner().invoke(main, ["attack", "inverting", "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "the run used federation.mode=async" in result.output


def test_fedprox_updates_of_several_steps_are_refused():
    """FedProx's proximal term has a zero gradient at the first local step only."""
    from raysim.attacks.harness import update_objective
    from raysim.core.messages import Broadcast, ClientUpdate

    update = ClientUpdate(3, 8, {"w": torch.zeros(1)}, metrics={"steps": 2})
    with pytest.raises(ConfigError, match=r"^client 3 took 2 local steps, and fedprox's loss adds a term"):
        update_objective(update, Broadcast({"w": torch.zeros(1)}), smoke_config("fedprox"), model=None)


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


@pytest.mark.parametrize(
    ("command", "option", "value", "fragment"),
    [
        ("inverting", "--iterations", "0", "0 is not in the range x>=1"),
        ("inverting", "--tv", "-0.1", "-0.1 is not in the range x>=0"),
        ("inverting", "--lr", "0", "0.0 is not in the range x>0"),
        ("inverting", "--refine", "-1", "-1 is not in the range x>=0"),
        ("smashed", "--step", "0", "0 is not in the range x>=1"),
        ("smashed", "--epochs", "0", "0 is not in the range x>=1"),
        ("smashed", "--public-rows", "0", "0 is not in the range x>=1"),
        ("features", "--k", "0", "0 is not in the range x>=1"),
        ("features", "--lr", "-1", "-1.0 is not in the range x>0"),
        ("inverting", "--tv", "nan", "nan is not a finite number"),
        ("inverting", "--lr", "inf", "inf is not a finite number"),
        ("smashed", "--tv", "-inf", "-inf is not in the range x>=0"),
        ("inverting", "--seed", str(2**63), f"{2**63} is not in the range 0<=x<={2**63 - 1}"),
    ],
)
def test_out_of_range_attack_settings_are_one_line_before_any_replay(command, option, value, fragment):
    bad = CliRunner().invoke(main, ["attack", command, "--run", "any", option, value])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        f"raysim: error: Invalid value for '{option}': {fragment}. (see 'raysim attack {command} --help')"
    ]


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


def finished_run(uri: str, folder, heard: dict[int, int]) -> str:
    """A FedAvg run that recorded its config, a final state and which clients its server heard (``heard``: client ->
    rounds), as a finished run logs them."""
    tracker = Tracker(uri)
    run_id = tracker.start("attacks", "recorded", {}, {})
    tracker.log_text(dump_yaml(smoke_config("fedavg")), "config.yaml")
    save_file({"params/w": torch.zeros(1)}, str(folder / "global_state.safetensors"))
    tracker.log_artifact(folder / "global_state.safetensors")
    tracker.log_artifact(save_participation(heard, folder))
    tracker.end()
    return run_id


def test_membership_of_a_run_whose_server_used_no_update_asks_for_clients(tracking_uri, tmp_path):
    run_id = finished_run(tracking_uri, tmp_path, {})  # every client dropped out of every round
    result = CliRunner().invoke(main, ["attack", "membership", "--run", run_id, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "raysim: error: the run has no clients to score by default (heard: none); pass --clients 0,1,..."
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["smashed", "--epochs", "3"], "--epochs does nothing under --inversion search (they train the network)"),
        (
            ["smashed", "--inversion", "network", "--tv", "0.1", "--lr", "0.5"],
            "--tv, --lr do nothing under --inversion network (they set the search)",
        ),
        (["features", "--iterations", "7"], "--iterations does nothing without --prototype (they set its search)"),
    ],
)
def test_an_option_the_others_make_do_nothing_is_one_line_before_any_replay(args, message):
    bad = CliRunner().invoke(main, ["attack", args[0], "--run", "any", *args[1:]])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        f"raysim: error: {message}; " + ("add --prototype" if args[0] == "features" else "drop them")
    ]


def test_membership_of_a_client_the_server_never_heard_is_one_line(tracking_uri, tmp_path):
    run_id = finished_run(tracking_uri, tmp_path, {0: 2, 4: 1})
    args = ["attack", "membership", "--run", run_id, "--tracking-uri", tracking_uri, "--clients", "4,1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "raysim: error: --clients names client 1, whose updates the run's server never used, so its rows are no "
        "members of the global model; leave --clients out to score the 2 clients it heard"
    ]


def test_a_client_without_a_personal_model_is_refused_for_the_personal_models_membership():
    with pytest.raises(ConfigError, match=r"^--clients names client 3, which holds no personal model in the run's "):
        refuse_non_members([0, 3], {0: {}, 1: {}, 4: {}}, "unused", "unused")
    refuse_non_members([4, 0], {0: {}, 1: {}, 4: {}}, "unused", "unused")  # each holds one: nothing to refuse


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        (["nosuch"], "attack, compare, data, ls, pretrain, report, run, tune, ui"),
        (["attack", "nosuch"], "april, features, inverting, label-leakage, membership, smashed"),
    ],
)
def test_an_unknown_command_lists_the_valid_ones(args, valid):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"raysim: error: unknown command 'nosuch'; valid commands: {valid}"]


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ("http://127.0.0.1:9", "MLflow server http://127.0.0.1:9 does not answer"),
        ("FOLDER", "is a plain folder, which MLflow 3 refuses"),
    ],
)
def test_a_store_that_cannot_be_read_is_one_line_within_seconds(tmp_path, store, message):
    store = str(tmp_path) if store == "FOLDER" else store  # MLflow's client would retry a dead server for minutes
    result = CliRunner().invoke(main, ["attack", "membership", "--run", "any", "--tracking-uri", store])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and message in result.output
