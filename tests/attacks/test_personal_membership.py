"""Membership inference against a personalised method's own models: each client's rows scored under the model its
run evaluates it with (Ditto's personal model), read from the run's last checkpoint."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient
from rich.console import Console

from raysim.attacks.harness import membership
from raysim.attacks.recorded import client_states, final_state, recorded_config
from raysim.cli import main
from raysim.engine.driver import run
from raysim.engine.setup import initial_state, prepare_shards, resolved
from raysim.testing.smoke import smoke_config


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, empty_store):
    """A tracked two-round Ditto run on the sequential backend, its checkpoints kept."""
    folder = tmp_path_factory.mktemp("personal")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    (folder / "mlflow.db").write_bytes(empty_store.read_bytes())
    config = smoke_config(
        "ditto",
        {
            "federation": {"rounds": 2},
            "tracking": {"tracking_uri": uri},
            "checkpoint": {"dir": str(folder / "checkpoints"), "keep": 1},
        },
    )
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))
    return uri, result.run_id


def test_each_client_is_scored_under_its_own_model(recorded):
    uri, run_id = recorded
    config = recorded_config(uri, run_id)
    states = client_states(uri, run_id, config)
    params = final_state(uri, run_id).params
    config, _, _, shards = initial_state(resolved(config), prepare_shards(config))
    clients = sorted(states)
    assert clients
    global_model = membership(config, params, shards, clients)
    as_global = membership(config, params, shards, clients, {c: params for c in clients})
    personal = membership(config, params, shards, clients, states)
    assert as_global.roc.auc == global_model.roc.auc  # scoring client by client pools the same losses
    assert (personal.members, personal.non_members) == (global_model.members, global_model.non_members)
    assert personal.roc.auc != global_model.roc.auc  # Ditto's own models are not the global one


def test_membership_of_the_personal_models_is_a_run_nested_under_the_attacked_one(recorded):
    uri, run_id = recorded
    result = CliRunner().invoke(
        main, ["attack", "membership", "--run", run_id, "--tracking-uri", uri, "--model", "personal"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("membership (personal model): AUC")
    attack_id = result.output.strip().splitlines()[-1].split("attack run ")[1].split(",")[0]
    attack_run = MlflowClient(tracking_uri=uri).get_run(attack_id)
    assert attack_run.data.tags["mlflow.parentRunId"] == run_id and attack_run.data.params["model"] == "personal"
    assert 0.0 <= attack_run.data.metrics["auc"] <= 1.0
