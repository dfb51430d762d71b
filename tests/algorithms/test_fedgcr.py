"""FedGCR, FedGC, FedGR in the round loop: clustering, per-client persistent state, the loss schedule, the
communicated extras, and equal numbers on both backends."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raysim import group_custom as gc
from raysim.config import build_config
from raysim.errors import ConfigError
from raysim.runner import initial_state, make_simulation, prepare_shards

pytestmark = pytest.mark.usefixtures("ray_session")

SMALL = {"federation": {"clients": 6, "rounds": 3, "participation": 1.0, "seed": 2, "eval_every": 1},
         "data": {"dataset": "synthetic", "partition": "domains"},
         "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
         "resources": {"backend": "sequential"},
         "fedgcr": {"clusters": 3}}


def simulate(method, *layers, rounds=None):
    config = build_config(method, [SMALL, *layers])
    initial, shards = initial_state(config, prepare_shards(config))
    simulation = make_simulation(config, shards, initial)
    reports = [simulation.run_round(r) for r in range(1, (rounds or config.federation.rounds) + 1)]
    return config, shards, simulation, reports


def test_fedgcr_clusters_clients_and_keeps_their_state_between_participations():
    config, shards, simulation, reports = simulate("fedgcr")
    state = simulation.global_state()
    assert (state.server["cluster_of"] >= 0).all() and state.server["gc_centres"].shape == (3, 64)
    for report in reports:
        assert {"avg_acc", "sigma_type", "sigma_client", "cluster_acc", "clusters_used"} <= set(report.metrics)
        assert report.metrics["avg_acc"] == report.metrics["local_acc"]
    for client in range(6):
        kept = simulation.client_states[client]
        assert kept["h_prev"].shape == (64,) and kept["z_prev"].shape == (len(shards.train(client)), 64)
        assert torch.equal(kept["h_prev"], state.server["latest_repr"][client])  # the h_tilde it sent
    # round 2 on: the centres H go to every client and each client gets its cluster id (one int64)
    sent = reports[1].metrics["bytes_down"] - reports[0].metrics["bytes_down"]
    assert sent == 6 * (3 * 64 * 4) + 6 * 8


def test_contrastive_terms_start_once_centres_exist():
    config, shards, simulation, _ = simulate("fedgcr", rounds=1)
    runtime, method = simulation.executor.runtime, simulation.method
    first = runtime.train(1, *_tasks(method, 1, simulation.global_state(), {}))
    assert all(r.stats["train_loss"] == pytest.approx(r.stats["train_ce"]) for r in first)  # CE only in round 1
    later = runtime.train(2, *_tasks(method, 2, simulation.global_state(), simulation.client_states))
    assert all(r.stats["train_loss"] > r.stats["train_ce"] for r in later)  # + lambda1 l_GC + lambda2 l_RA


def _tasks(method, round, state, client_states):
    view, instructions = method.configure(round, state, list(range(6)))
    return view, [(c, instructions.get(c, {}), client_states.get(c)) for c in range(6)]


def test_fedgr_represents_clients_by_the_class_balanced_frozen_class_token():
    config, shards, simulation, _ = simulate("fedgr", rounds=1)
    latest = simulation.global_state().server["latest_repr"]
    for client in range(6):
        data = shards.train(client)
        expected = gc.class_balanced_mean(torch.as_tensor(data.features["cls"]), torch.as_tensor(data.labels))
        assert torch.allclose(latest[client], expected, atol=1e-6)
    assert not simulation.client_states  # no GC-Net, no contrastive state


@pytest.mark.parametrize("method, options, round, expected", [
    # losses 1, 2, 4; sizes 1, 1, 2; clusters {0, 0}, {1}
    ("fedgc", {}, 2, [1, 1, 2]),  # N_i
    ("fedgcr", {}, 1, [1 / 4 * 1, 1 / 4 * 4, 2 / 4 * 16]),  # beta = 0 in round 1: omega * L^2
    ("fedgcr", {}, 2, [1 / 4 * 1.5 ** 0.5, 1 / 4 * 2 ** 1.5 * 1.5 ** 0.5, 2 / 4 * 16]),  # beta = 0.25
    ("fedgcr", {"reweighting": "code"}, 1, None),  # beta = delta, not the Eq. 5 schedule
])
def test_aggregation_weights_follow_the_method_and_round(method, options, round, expected):
    from raysim import fairness
    from raysim.registry import get_method

    config = build_config(method, [SMALL, {"fedgcr": {"clusters": 3, **options}}])
    weights = get_method(method)(config).aggregation_weights(round, [1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1])
    if expected is None:
        expected = fairness.fedgr_weights([1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1], 0.5, 1.0, "code", round)
    assert torch.as_tensor(weights, dtype=torch.float64).div(sum(weights)).tolist() == \
        pytest.approx((torch.as_tensor(expected, dtype=torch.float64) / sum(expected)).tolist())


def test_updates_carry_only_the_parameters_and_h_tilde():
    _, _, simulation, _ = simulate("fedgcr", rounds=1)
    view, instructions = simulation.method.configure(2, simulation.global_state(), list(range(6)))
    results = simulation.executor.runtime.train(2, view, [(c, instructions.get(c, {}), simulation.client_states.get(c))
                                                         for c in range(6)])
    for result in results:  # nothing per row crosses to the server
        assert set(result.update) == set(simulation.global_state().params) | {"client_repr"}


def test_fewer_clients_than_clusters_send_only_the_fitted_centres():
    from raysim.method import ClientResult

    config, _, simulation, _ = simulate("fedgcr", rounds=1)
    state, method = simulation.global_state(), simulation.method
    params = {k: v.clone() for k, v in state.params.items()}
    two = [ClientResult(c, 10, {**params, "client_repr": torch.full((64,), float(c))}, {"train_ce": 1.0})
           for c in (0, 5)]
    after = method.aggregate(2, state, two)
    view, _ = method.configure(3, after, [0, 5])
    assert view["gc_centres"].shape == (2, 64)  # T' = 3, but only 2 clients reported


def test_ray_backend_gives_the_sequential_numbers():
    ray_layer = {"resources": {"backend": "ray", "workers": 2}}
    _, _, _, sequential = simulate("fedgcr", rounds=2)
    _, _, remote, on_ray = simulate("fedgcr", ray_layer, rounds=2)
    remote.shutdown()
    for a, b in zip(sequential, on_ray):
        for key in ("global_acc", "sigma_type", "cluster_acc", "train_loss"):
            assert a.metrics[key] == pytest.approx(b.metrics[key], abs=1e-6), key


def test_too_many_clusters_and_typeless_partitions_are_config_errors():
    with pytest.raises(ConfigError, match=r"fedgcr.clusters=7 \(T'\) is more than the 6 clients"):
        simulate("fedgcr", {"fedgcr": {"clusters": 7}}, rounds=1)
    with pytest.raises(ConfigError, match="gives clients no type"):
        simulate("fedgcr", {"data": {"partition": "iid"}}, rounds=1)


def test_cluster_accuracy_metric_scores_the_rounds_clients_against_their_types():
    from types import SimpleNamespace

    from raysim.method import ClientResult, GlobalState
    from raysim.registry import get_method

    method = get_method("fedgcr")(build_config("fedgcr", [SMALL]))
    state = GlobalState({}, {"cluster_of": torch.tensor([0, 0, 1, 1, 2, -1])})
    shards = SimpleNamespace(client_domain=np.array([0, 0, 0, 1, 1, 2]))
    results = [ClientResult(c, 3, {}) for c in range(5)]  # client 5 did not take part
    metrics, records = method.diagnostics(1, state, results, shards, True)
    # cluster 0 = types {0, 0}, cluster 1 = {0, 1} (one hit), cluster 2 = {1}: 4 of 5
    assert metrics["cluster_acc"] == pytest.approx(80.0) and metrics["clusters_used"] == 3.0
    assert records["clusters"] == {"0": 0, "1": 0, "2": 1, "3": 1, "4": 2}
