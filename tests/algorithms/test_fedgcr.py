"""FedGCR, FedGC, FedGR in the round loop: clustering, per-client persistent state, the loss schedule, the
communicated extras, and equal numbers on both backends."""

from __future__ import annotations

from contextlib import ExitStack
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysim.config import build_config
from raysim.core.errors import ConfigError
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.registry import get_method
from raysim.ops import contrastive as gc
from raysim.ops import reweighting
from raysim.testing.smoke import open_simulation

pytestmark = pytest.mark.usefixtures("ray_session")

SMALL = {
    "federation": {"clients": 6, "rounds": 3, "participation": 1.0, "seed": 2, "eval_every": 1},
    "data": {"dataset": "synthetic", "partition": "domains"},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
    "resources": {"backend": "sequential"},
    "fedgcr": {"clusters": 3},
}


@pytest.fixture
def simulate():
    """simulate(method, *layers, rounds=None) -> (config, shards, simulation, reports); stopped after the test."""
    with ExitStack() as stack:

        def run(method, *layers, rounds=None):
            config = build_config(method, [SMALL, *layers])
            simulation, _, shards = stack.enter_context(open_simulation(config))
            reports = [simulation.run_round(r) for r in range(1, (rounds or config.federation.rounds) + 1)]
            return config, shards, simulation, reports

        yield run


def test_fedgcr_clusters_clients_and_keeps_their_state_between_participations(simulate):
    config, shards, simulation, reports = simulate("fedgcr")
    state = simulation.global_state()
    assert (state.server["cluster_of"] >= 0).all() and state.server["gc_centres"].shape == (3, 64)
    for report in reports:
        assert {"avg_acc", "sigma_type", "sigma_client", "cluster_acc", "clusters_used"} <= set(report.metrics)
        assert report.metrics["avg_acc"] == report.metrics["local_acc"]
    for client in range(6):
        kept = simulation.clients.get(client)
        assert kept["h_prev"].shape == (64,) and kept["z_prev"].shape == (len(shards.train(client)), 64)
        assert torch.equal(kept["h_prev"], state.server["latest_repr"][client])  # the h_tilde it sent
    # round 2 on: the centres H go to every client and each client gets its cluster id (one int64)
    sent = reports[1].metrics["bytes_down"] - reports[0].metrics["bytes_down"]
    assert sent == 6 * (3 * 64 * 4) + 6 * 8


def test_contrastive_terms_start_once_centres_exist(simulate):
    config, shards, simulation, _ = simulate("fedgcr", rounds=1)
    executor, method = simulation.executor, simulation.method
    first = executor.train(1, *_tasks(method, 1, simulation.global_state(), {}))
    assert all(u.metrics["train_loss"] == pytest.approx(u.metrics["train_ce"]) for u in first)  # CE only in round 1
    later = executor.train(2, *_tasks(method, 2, simulation.global_state(), simulation.clients))
    assert all(u.metrics["train_loss"] > u.metrics["train_ce"] for u in later)  # + lambda1 l_GC + lambda2 l_RA


def _tasks(method, round, state, client_states):
    broadcast = method.configure(round, state, list(range(6)))
    return broadcast, [(c, broadcast.instructions.get(c, {}), client_states.get(c)) for c in range(6)]


def test_fedgr_represents_clients_by_the_class_balanced_frozen_class_token(simulate):
    config, shards, simulation, _ = simulate("fedgr", rounds=1)
    latest = simulation.global_state().server["latest_repr"]
    for client in range(6):
        data = shards.train(client)
        expected = gc.class_balanced_mean(torch.as_tensor(data.features["cls"]), torch.as_tensor(data.labels))
        assert torch.allclose(latest[client], expected, atol=1e-6)
    assert not simulation.clients  # no GC-Net, no contrastive state


@pytest.mark.parametrize(
    "method, options, round, expected",
    [
        # losses 1, 2, 4; sizes 1, 1, 2; clusters {0, 0}, {1}
        ("fedgc", {}, 2, [1, 1, 2]),  # N_i
        ("fedgcr", {}, 1, [1 / 4 * 1, 1 / 4 * 4, 2 / 4 * 16]),  # beta = 0 in round 1: omega * L^2
        ("fedgcr", {}, 2, [1 / 4 * 1.5**0.5, 1 / 4 * 2**1.5 * 1.5**0.5, 2 / 4 * 16]),  # beta = 0.25
        ("fedgcr", {"reweighting": "code"}, 1, None),  # beta = delta, not the Eq. 5 schedule
    ],
)
def test_aggregation_weights_follow_the_method_and_round(method, options, round, expected):
    config = build_config(method, [SMALL, {"fedgcr": {"clusters": 3, **options}}])
    weights = get_method(method).cls(config).aggregation_weights(round, [1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1])
    if expected is None:
        expected = reweighting.fedgr_weights([1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1], 0.5, 1.0, "code", round)
    assert torch.as_tensor(weights, dtype=torch.float64).div(sum(weights)).tolist() == pytest.approx(
        (torch.as_tensor(expected, dtype=torch.float64) / sum(expected)).tolist()
    )


def test_updates_carry_only_the_parameters_and_h_tilde(simulate):
    _, _, simulation, _ = simulate("fedgcr", rounds=1)
    updates = simulation.executor.train(2, *_tasks(simulation.method, 2, simulation.global_state(), simulation.clients))
    for update in updates:  # nothing per row crosses to the server
        assert set(update.params) == set(simulation.global_state().params) and set(update.extras) == {"client_repr"}


def test_fewer_clients_than_clusters_send_only_the_fitted_centres(simulate):
    config, _, simulation, _ = simulate("fedgcr", rounds=1)
    state, method = simulation.global_state(), simulation.method
    params = {k: v.clone() for k, v in state.params.items()}
    two = [ClientUpdate(c, 10, params, {"client_repr": torch.full((64,), float(c))}, {"train_ce": 1.0}) for c in (0, 5)]
    after = method.aggregate(2, state, two)
    assert method.configure(3, after, [0, 5]).extras["gc_centres"].shape == (2, 64)  # T' = 3, but 2 clients reported


def test_ray_backend_gives_the_sequential_numbers(simulate):
    ray_layer = {"resources": {"backend": "ray", "workers": 2}}
    _, _, _, sequential = simulate("fedgcr", rounds=2)
    _, _, _, on_ray = simulate("fedgcr", ray_layer, rounds=2)
    for a, b in zip(sequential, on_ray):
        for key in ("global_acc", "sigma_type", "cluster_acc", "train_loss"):
            assert a.metrics[key] == pytest.approx(b.metrics[key], abs=1e-6), key


def test_too_many_clusters_and_typeless_partitions_are_config_errors(simulate):
    with pytest.raises(ConfigError, match=r"fedgcr.clusters=7 \(T'\) is more than the 6 clients"):
        simulate("fedgcr", {"fedgcr": {"clusters": 7}}, rounds=1)
    with pytest.raises(ConfigError, match="gives clients no type"):
        simulate("fedgcr", {"data": {"partition": "iid"}}, rounds=1)


def test_cluster_accuracy_metric_scores_the_rounds_clients_against_their_types():
    method = get_method("fedgcr").cls(build_config("fedgcr", [SMALL]))
    state = GlobalState({}, {"cluster_of": torch.tensor([0, 0, 1, 1, 2, -1])})
    shards = SimpleNamespace(client_domain=np.array([0, 0, 0, 1, 1, 2]))
    results = [ClientUpdate(c, 3, {}) for c in range(5)]  # client 5 did not take part
    metrics, records = method.diagnostics(1, state, results, shards, True)
    # cluster 0 = types {0, 0}, cluster 1 = {0, 1} (one hit), cluster 2 = {1}: 4 of 5
    assert metrics["cluster_acc"] == pytest.approx(80.0) and metrics["clusters_used"] == 3.0
    assert records["clusters"] == {"0": 0, "1": 0, "2": 1, "3": 1, "4": 2}
