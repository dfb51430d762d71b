"""Membership inference against a personalised method's own models: each client's rows scored under the model its
run evaluates it with (Ditto's personal model), read from the run's last checkpoint."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from raysim.attacks.membership_attack import membership
from raysim.attacks.recorded import client_states, final_state, personal_models, recorded_config
from raysim.cli import main
from raysim.engine.setup import initial_state, prepare_shards, resolved


@pytest.fixture(scope="module")
def recorded(tracked_run):
    """A tracked two-round Ditto run on the sequential backend, its checkpoints kept."""
    return tracked_run("ditto", {"federation": {"rounds": 2}})


def scored(uri, run_id):
    """The run's config, final global tensors, shards, clients with a state, and those clients' states."""
    config = recorded_config(uri, run_id)
    state = final_state(uri, run_id)
    states, params = personal_models(config, state, client_states(uri, run_id, config)), state.params
    config, _, _, shards = initial_state(resolved(config), prepare_shards(config))
    return config, params, shards, sorted(states), states


def test_each_client_is_scored_under_its_own_model(recorded):
    config, params, shards, clients, states = scored(*recorded)
    assert clients
    global_model = membership(config, params, shards, clients)
    as_global = membership(config, params, shards, clients, {c: params for c in clients})
    personal = membership(config, params, shards, clients, states)
    assert as_global.roc.auc == global_model.roc.auc  # scoring client by client pools the same losses
    assert (personal.members, personal.non_members) == (global_model.members, global_model.non_members)
    assert personal.roc.auc != global_model.roc.auc  # Ditto's own models are not the global one


def test_membership_of_the_personal_models_is_a_run_nested_under_the_attacked_one(recorded, nested_run):
    uri, run_id = recorded
    result = CliRunner().invoke(
        main, ["attack", "membership", "--run", run_id, "--tracking-uri", uri, "--model", "personal"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("membership (personal model): loss threshold AUC")
    attack_run = nested_run(uri, run_id, result.output)
    assert attack_run.data.params["model"] == "personal"
    config, params, shards, clients, states = scored(uri, run_id)  # the attack's own numbers, computed here
    assert attack_run.data.metrics["auc"] == pytest.approx(membership(config, params, shards, clients, states).roc.auc)
