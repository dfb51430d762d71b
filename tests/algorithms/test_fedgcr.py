"""FedGCR, FedGC, FedGR in the round loop: clustering, per-client persistent state, the communicated extras, and
equal numbers on both backends; the L_ij that FedGR weighs (both forms) by hand on one tiny client."""

from __future__ import annotations

from contextlib import ExitStack
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysim.algorithms._fairness import last_epoch_mean
from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core import training
from raysim.core.messages import Broadcast, ClientUpdate, GlobalState
from raysim.core.protocol import ClientContext
from raysim.core.registry import get_method
from raysim.data.shards import ClientData
from raysim.models.factory import build_model
from raysim.ops import contrastive as gc
from raysim.testing.smoke import open_simulation

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


UNEVEN = {"delta": 0.4, "gamma": 0.8, "q": 2.0}  # delta != gamma and q != 1: a swap or a fixed square shows


@pytest.mark.parametrize(
    "method, options, round, expected",
    [
        # losses 1, 2, 4; sizes 1, 1, 2; clusters {0, 0}, {1}
        ("fedgc", {}, 2, [1, 1, 2]),  # N_i
        ("fedgcr", {}, 1, [1 / 4 * 1, 1 / 4 * 4, 2 / 4 * 16]),  # beta = 0 in round 1: omega * L^2
        ("fedgcr", {}, 2, [1 / 4 * 1.5**0.5, 1 / 4 * 2**1.5 * 1.5**0.5, 2 / 4 * 16]),  # beta = 0.25
        # delta 0.4, gamma 0.8, q 2: beta = 0.4 (1 - 0.8) = 0.08, weights omega (L^0.92 Lbar^0.08)^3
        ("fedgcr", UNEVEN, 2, [1 / 4 * 1.5**0.24, 1 / 4 * 2**2.76 * 1.5**0.24, 2 / 4 * 64]),
        # the code form: beta = delta = 0.4 (not the Eq. 5 schedule), individual power a = 0.4 + 0.6 * 0.9 = 0.94
        ("fedgcr", {**UNEVEN, "reweighting": "code"}, 1, [1 / 4 * 1.5**0.18, 1 / 4 * 2**2.82 * 1.5**0.18, 2 / 4 * 64]),
    ],
)
def test_aggregation_weights_follow_the_method_and_round(method, options, round, expected):
    config = build_config(method, [SMALL, {"fedgcr": {"clusters": 3, **options}}])
    weights = get_method(method).cls(config).aggregation_weights(round, [1.0, 2.0, 4.0], [1, 1, 2], [0, 0, 1])
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
    reps = {c: {"client_repr": torch.full((64,), float(c))} for c in (0, 5)}
    two = [ClientUpdate(c, 10, params, reps[c], {"local_loss": 1.0}) for c in (0, 5)]
    after = method.aggregate(2, state, two)
    assert method.configure(3, after, [0, 5]).extras["gc_centres"].shape == (2, 64)  # T' = 3, but 2 clients reported


def test_ray_backend_gives_the_sequential_numbers(simulate, ray_session):
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


def test_last_epoch_mean_weighs_each_step_by_its_rows_over_the_last_epoch_only():
    # 3 rows, batch 2, 2 epochs: steps of 2, 1 | 2, 1 rows; the last epoch's objective sums to 2 * 2 + 4 * 1
    assert last_epoch_mean([9.0, 7.0, 2.0, 4.0], [2, 1, 2, 1], 3) == pytest.approx(8 / 3)  # not (2 + 4) / 2
    assert np.isnan(last_epoch_mean([], [], 0))


TAU, LAMBDA1, LAMBDA2 = 0.5, 0.5, 0.1  # the paper's, fedgcr's defaults


def one_client(method, lr, **options):
    """(method, model, data, ctx, received params) for one 5-row client on the nano backbone, 3 classes; batches
    of 2 rows, 2 local epochs, so that a mean over steps or over both epochs would differ from Algorithm 1's L."""
    train = {"batch_size": 2, "local_epochs": 2, "lr": lr, "weight_decay": 0.0}
    config = build_config(method, [SMALL, {"train": train, "fedgcr": {"clusters": 2, **options}}])
    instance = get_method(method).cls(config)
    model = build_model(config, instance, 3)
    images = np.random.default_rng(0).integers(0, 256, size=(5, 16, 16, 3), dtype=np.uint8)
    x = training.model_inputs(model, images, torch.device("cpu"))
    cls = instance.row_features(model, x)["cls"].numpy()
    data = ClientData(images, np.array([0, 1, 2, 0, 1]), np.zeros(5, dtype=np.int64), {"cls": cls})
    ctx = ClientContext(2, 0, 7, model, torch.device("cpu"), config, {})
    received = {k: v.clone() for k, v in model.trainable_state().items()}
    return instance, model, data, ctx, received, x


@torch.no_grad()
def received_forward(method, model, x, data):
    """(logits, z, h) of the received model on every row (h None without GC-Net)."""
    if not method.customize:
        return model(x), None, None
    return method.customized(model, x, torch.as_tensor(data.features["cls"]))


@pytest.mark.parametrize(
    "method, contrast", [("fedgcr", None), ("fedgcr", "paper"), ("fedgcr", "code"), ("fedgr", None)]
)
def test_local_client_loss_is_algorithm_1s_objective_over_the_last_epoch_per_row(method, contrast):
    # lr 1e-12: the parameters stay the received ones, so Algorithm 1's L, the last epoch's objective summed over
    # its rows, divided by 5, is the received model's objective over all rows, computed here by hand in float64
    instance, model, data, ctx, received, x = one_client(method, 1e-12, **({"contrast": contrast} if contrast else {}))
    logits, z, h = received_forward(instance, model, x, data)
    y = torch.as_tensor(data.labels)
    expected = torch.nn.functional.cross_entropy(logits.double(), y)  # CE alone: no centres yet (line 9)
    broadcast, state = Broadcast(received), None
    if contrast:  # centres H, cluster 1, h_prev, and a z_prev near z so that l_RA is not ~0
        generator = torch.Generator().manual_seed(1)
        centres, h_prev = 0.1 * torch.randn(2, 64, generator=generator), 0.1 * torch.randn(64, generator=generator)
        z_prev = 1.05 * z + 0.1 * torch.randn(5, 64, generator=generator)
        broadcast, state = Broadcast(received, {"gc_centres": centres}), {"h_prev": h_prev, "z_prev": z_prev}
        ctx.instructions["gc_cluster"] = torch.tensor(1)
        h, z, centres, h_prev, z_prev = (t.double() for t in (h, z, centres, h_prev, z_prev))
        ra_tau = TAU
        if contrast == "code":  # the authors' code: cosine similarities, and no temperature in l_RA
            h, z, centres, h_prev, z_prev = (t / t.norm(dim=-1, keepdim=True) for t in (h, z, centres, h_prev, z_prev))
            ra_tau = 1.0
        # Eq. 7: -log exp(h.H_1/tau) / (exp(h.h_prev/tau) + sum_t exp(h.H_t/tau))
        anchors = torch.cat([h @ h_prev[:, None], h @ centres.T], dim=1) / TAU
        l_gc = (torch.logsumexp(anchors, dim=1) - h @ centres[1] / TAU).mean()
        # Eq. 8 with z0 = z (the received parameters): -log exp(z.z0/tau) / (exp(z.z0/tau) + exp(z.z_prev/tau))
        s0, s_prev = (z * z).sum(1) / ra_tau, (z * z_prev).sum(1) / ra_tau
        l_ra = (torch.logaddexp(s0, s_prev) - s0).mean()
        assert l_gc > 0.1 and l_ra > 0.1
        expected = expected + LAMBDA1 * l_gc + LAMBDA2 * l_ra
    update = instance.client_update(ctx, broadcast, state, data)
    assert update.metrics["local_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert "global_loss" not in update.metrics


@pytest.mark.parametrize("method", ["fedgcr", "fedgr"])
def test_global_client_loss_is_the_received_models_cross_entropy_before_training(method):
    instance, model, data, ctx, received, x = one_client(method, 0.05, client_loss="global")
    logits, _, _ = received_forward(instance, model, x, data)
    expected = torch.nn.functional.cross_entropy(logits.double(), torch.as_tensor(data.labels)).item()
    update = instance.client_update(ctx, Broadcast(received), None, data)
    assert update.metrics["global_loss"] == pytest.approx(expected, rel=1e-5)
    assert "local_loss" not in update.metrics
    trained, _, _ = received_forward(instance, model, x, data)  # training moved the model: measured before it
    assert torch.nn.functional.cross_entropy(trained, torch.as_tensor(data.labels)).item() != pytest.approx(expected)


@pytest.mark.parametrize("client_loss, key", [("local", "local_loss"), ("global", "global_loss")])
def test_fedgr_weighs_the_loss_its_client_loss_option_names(client_loss, key):
    config = build_config("fedgcr", [SMALL, {"fedgcr": {"clusters": 2, "client_loss": client_loss}}])
    method = get_method("fedgcr").cls(config)
    server = {
        "cluster_of": torch.full((6,), -1),
        "latest_repr": torch.zeros(6, 2),
        "gc_centres": torch.zeros(2, 2),
        "centres_fitted": torch.tensor(0),
    }
    reps = [torch.tensor([0.0, 0.0]), torch.tensor([0.1, 0.0]), torch.tensor([5.0, 5.0])]
    other = ({"local_loss", "global_loss"} - {key}).pop()
    updates = [  # the other metric would give other weights
        ClientUpdate(c, n, {"w": torch.tensor([float(c)])}, {"client_repr": r}, {key: loss, other: 1.0})
        for c, n, r, loss in zip(range(3), (1, 1, 2), reps, (1.0, 2.0, 4.0))
    ]
    after = method.aggregate(1, GlobalState({"w": torch.zeros(1)}, server), updates)
    assert after.server["cluster_of"][:3].tolist() in ([0, 0, 1], [1, 1, 0])
    # round 1: beta = 0, weights omega * L^2 = 1/4 * 1, 1/4 * 4, 2/4 * 16 = 0.25, 1, 8 over 9.25
    assert after.params["w"].item() == pytest.approx((1 * 1 + 8 * 2) / 9.25)


def test_client_loss_names_its_valid_values():
    with pytest.raises(ConfigError) as error:
        build_config("fedgcr", [{"fedgcr": {"client_loss": "final"}}])
    assert str(error.value) == "fedgcr.client_loss='final' is not one of local, global"
