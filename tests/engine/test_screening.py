"""Poisoned client updates are rejected with the client and the channel named, and the round aggregates the rest;
with ``federation.bad_updates=fail`` the run stops instead. Every channel a client sends is screened: the
parameters, each extra (SGPT's selection counts, FedGCR's h_tilde), the scalar metrics aggregation reads (the
fairness methods' losses, FedVZ's SPSA coefficient) and the persistent state it keeps."""

from __future__ import annotations

import math

import pytest
import torch

from raysim.base.errors import BadUpdateError, ConfigError
from raysim.core.messages import ClientUpdate
from raysim.core.registry import get_method
from raysim.engine.screening import screen
from raysim.testing.smoke import open_simulation, smoke_config

pytestmark = pytest.mark.usefixtures("ray_session")

ONE_ROUND = {
    "federation": {"rounds": 1, "participation": 1.0, "seed": 4},
    "train": {"cohort": "off"},
}  # poisons client_update
VICTIM = 2


def test_screen_names_the_client_and_the_channel():
    params = {"a": torch.zeros(2), "b": torch.zeros(1, 3)}
    good = ClientUpdate(0, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, {"counts": torch.ones(4)})
    nan = ClientUpdate(1, 5, {"a": torch.tensor([1.0, float("nan")]), "b": torch.ones(1, 3)})
    inf = ClientUpdate(2, 5, {"a": torch.ones(2), "b": torch.full((1, 3), float("inf"))})
    shape = ClientUpdate(3, 5, {"a": torch.ones(3), "b": torch.ones(1, 3)})
    missing = ClientUpdate(4, 5, {"a": torch.ones(2)})
    unknown = ClientUpdate(5, 5, {"a": torch.ones(2), "b": torch.ones(1, 3), "c": torch.ones(1)})
    extra = ClientUpdate(6, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, {"counts": torch.ones(5)})
    undeclared = ClientUpdate(7, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, {"leak": torch.ones(1)})
    metric = ClientUpdate(8, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, metrics={"global_loss": math.inf})
    state = ClientUpdate(9, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, state={"h": torch.ones(3)})
    rows = ClientUpdate(10, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, trained={"b": torch.tensor([True, False])})
    tiered = ClientUpdate(
        11, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, trained={"a": torch.tensor([True, False])}
    )
    stray = ClientUpdate(12, 5, {"a": torch.ones(2), "b": torch.ones(1, 3)}, trained={"z": torch.tensor([True])})
    updates = [good, nan, inf, shape, missing, unknown, extra, undeclared, metric, state, rows, tiered, stray]
    kept, rejected = screen(updates, params, {"counts": (4,)}, {9: {"h": torch.zeros(2)}})
    assert kept == [good, tiered]
    assert rejected == {
        1: "client 1 (params a has NaN or Inf)",
        2: "client 2 (params b has NaN or Inf)",
        3: "client 3 (params a: expected shape (2,), got shape (3,))",
        4: "client 4 (params b: expected shape (1, 3), got nothing)",
        5: "client 5 (params c is not a global parameter)",
        6: "client 6 (extra counts: expected shape (4,), got shape (5,))",
        7: "client 7 (extra leak is not one the method declares)",
        8: "client 8 (metric global_loss is inf)",
        9: "client 9 (state h: expected shape (2,), got shape (3,))",
        10: "client 10 (trained b: expected a boolean mask of 1 rows)",
        12: "client 12 (trained z is not a global parameter)",
    }


def poison(monkeypatch, method: str, channel: str, name: str):
    """Client VICTIM of ``method`` sends NaN in ``channel`` (params, extras, metrics or state) under ``name``."""
    cls = get_method(method).cls
    honest = cls.client_update

    def client_update(self, ctx, broadcast, client_state, data):
        update = honest(self, ctx, broadcast, client_state, data)
        if ctx.client_id == VICTIM:
            if channel == "metrics":
                update.metrics[name] = math.nan
            else:
                tensors = getattr(update, channel)
                tensors[name] = torch.full_like(tensors[name], float("nan"))
        return update

    monkeypatch.setattr(cls, "client_update", client_update)


CHANNELS = [  # one per method family and side channel
    ("fedvpt", "params", "prompts.shallow"),
    ("sgpt", "extras", "selection_counts"),
    ("fgpt", "params", "extra.group_prompts"),
    ("fedgcr", "extras", "client_repr"),
    ("fedgcr", "state", "z_prev"),
    ("ditto", "state", "vit.head.weight"),
    ("qffl", "metrics", "global_loss"),
    ("fedvz", "metrics", "spsa_coefficient"),
    ("fedmix", "extras", "data_mean"),
    ("moon", "state", "prompts.shallow"),
    ("fedem", "state", "extra.mixture"),
    ("pfedhn", "params", "vit.head.weight"),
]


@pytest.mark.parametrize("method, channel, name", CHANNELS)
def test_a_poisoned_channel_is_rejected_named_and_the_rest_aggregate(monkeypatch, caplog, method, channel, name):
    config = smoke_config(method, ONE_ROUND)
    with open_simulation(config) as (clean, _, _):
        broadcast = clean.method.configure(1, clean.state, list(range(6)))
        tasks = [(c, broadcast.instructions.get(c, {}), None) for c in range(6)]
        expected_updates = clean.executor.train(1, broadcast, tasks)
    poison(monkeypatch, method, channel, name)
    with open_simulation(config) as (simulation, _, _), caplog.at_level("WARNING", logger="raysim"):
        report = simulation.run_round(1)
        state = simulation.global_state()
        states = dict(simulation.clients)
    assert report.metrics["rejected_updates"] == 1.0
    label = {"params": "params", "extras": "extra", "metrics": "metric", "state": "state"}[channel]
    assert f"round 1: rejected the update of client {VICTIM} ({label} {name} " in caplog.text
    assert all(torch.isfinite(v).all() for v in state.params.values())
    assert VICTIM not in states  # a rejected client keeps no new state
    if get_method(method).family not in ("split", "domain"):  # the same as aggregating the five honest updates
        honest = [u for u in expected_updates if u.client_id != VICTIM]
        with open_simulation(config) as (fresh, _, _):
            expected = fresh.method.aggregate(1, fresh.state, honest).params
        for key in state.params:
            assert torch.allclose(state.params[key], expected[key], atol=1e-7), key


def test_fail_policy_stops_the_run(monkeypatch):
    poison(monkeypatch, "fedvpt", "params", "prompts.shallow")
    config = smoke_config("fedvpt", ONE_ROUND, {"federation": {"bad_updates": "fail"}})
    with open_simulation(config) as (simulation, _, _), pytest.raises(BadUpdateError, match=r"round 1: client 2"):
        simulation.run_round(1)


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="federation.bad_updates='skip' is not one of reject, fail"):
        smoke_config("fedvpt", {"federation": {"bad_updates": "skip"}})
