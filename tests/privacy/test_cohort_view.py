"""What the server's step sees under user-level DP and secure aggregation, on tiny tensors: the clipped mean by hand,
the noise's scale, per-channel clips, adaptive clipping's step, the survivors' threshold, the clients' noise."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.protocol import SendsExtras
from raysim.privacy.cohort_view import VIEW_CLIENT, CohortView


def config(**privacy):
    layers = [
        {"federation": {"clients": 40, "participation": 0.1}, "privacy": {"mode": "user", "delta": 1e-3, **privacy}}
    ]
    return build_config("fedvpt", layers)


class Plain:
    """A method's side of the view: no extras."""


class Counting(SendsExtras):
    """A method sending one extra that user-level DP bounds to half the clip (as SGPT's counts, as shares)."""

    private_extras: ClassVar[dict[str, float]] = {"counts": 0.5}

    def uplink_extras(self, state):
        return {"counts": (2,)}

    def bounded_extra(self, name, tensor):
        return tensor / tensor.sum()


STATE = GlobalState({"w": torch.tensor([1.0, 1.0])})


def update(client, w, **extras):
    return ClientUpdate(client, 10, {"w": torch.tensor(w)}, dict(extras))


def test_without_noise_to_speak_of_the_step_gets_the_received_tensors_plus_the_clipped_updates_over_m():
    view = CohortView(config(noise_multiplier=1e-12, clip="1.0"), Plain())
    updates = [update(0, [4.0, 5.0]), update(1, [1.5, 1.0]), update(2, [1.0, 1.0])]  # deltas (3, 4), (0.5, 0), 0
    [seen], metrics = view.view(1, STATE, updates, 1.0)
    # clipped: (0.6, 0.8), (0.5, 0), (0, 0); summed (1.1, 0.8); divided by m = 4 (not by the 3 that arrived)
    assert seen.client_id == VIEW_CLIENT and seen.num_samples == 1 and not seen.metrics
    assert seen.params["w"].tolist() == pytest.approx([1 + 1.1 / 4, 1 + 0.8 / 4])
    assert metrics == {"privacy_clip": 1.0}  # a fixed clip releases nothing else


def test_the_noise_on_the_sum_has_standard_deviation_z_c():
    big = GlobalState({"w": torch.zeros(100_000)})
    view = CohortView(config(noise_multiplier=2.0, clip="0.5"), Plain())
    [seen], _ = view.view(3, big, [], 0.5)
    # no client: the mean is the noise alone, N(0, (z C)^2) / m
    assert (seen.params["w"] * 4).std().item() == pytest.approx(2.0 * 0.5, rel=0.01)
    [again], _ = view.view(3, big, [], 0.5)
    assert torch.equal(seen.params["w"], again.params["w"])  # (run seed, round) fixes the draw: resume is exact


def test_an_extra_is_clipped_to_its_share_and_the_sensitivity_grows_with_it():
    view = CohortView(config(noise_multiplier=1e-12, clip="2.0"), Counting())
    updates = [update(0, [1.0, 1.0], counts=torch.tensor([3.0, 1.0]))]
    [seen], _ = view.view(1, STATE, updates, 2.0)
    shares = torch.tensor([0.75, 0.25])  # bounded to shares; their norm 0.79 is within 0.5 x C = 1: kept
    assert seen.extras["counts"].tolist() == pytest.approx((shares / 4).tolist())
    noisy = CohortView(config(noise_multiplier=1.0, clip="2.0"), Counting())
    big = GlobalState({"w": torch.zeros(100_000)})
    [seen], _ = noisy.view(1, big, [], 2.0)
    # S = C sqrt(1 + 0.5^2): every coordinate's noise, the update's too, has standard deviation z S
    assert (seen.params["w"] * 4).std().item() == pytest.approx(2.0 * math.sqrt(1.25), rel=0.01)
    assert seen.extras["counts"].shape == (2,)  # declared: there even when no client sent it


def test_adaptive_clipping_counts_the_unclipped_clients_and_steps_c():
    view = CohortView(config(noise_multiplier=1e-12, clip="adaptive:0.5", count_noise=1e-9, clip_lr=0.2), Plain())
    updates = [update(c, w) for c, w in enumerate([[1.0, 1.2], [1.0, 4.0], [1.1, 1.0], [1.0, 1.0]])]  # 0.2, 3, 0.1, 0
    _, metrics = view.view(1, STATE, updates, 1.0)
    # centred bits: (3 - 4/2) / m + 1/2 = 3/4 of the cohort unclipped, over the 1/2 aimed at: C shrinks
    assert metrics["privacy_unclipped_share"] == pytest.approx((3 - 2) / 4 + 0.5)
    assert metrics["privacy_next_clip"] == pytest.approx(1.0 * math.exp(-0.2 * ((3 - 2) / 4 + 0.5 - 0.5)))
    _, metrics = view.view(2, STATE, [update(0, [9.0, 1.0])], 1.0)  # one client arrived, clipped
    assert metrics["privacy_next_clip"] == pytest.approx(math.exp(-0.2 * ((0 - 0.5) / 4 + 0.5 - 0.5)))


def test_adaptive_clipping_starts_at_clip_start_which_a_fixed_clip_refuses():
    assert config(noise_multiplier=1.0, clip="adaptive:0.5").privacy.initial_clip == 1.0
    assert config(noise_multiplier=1.0, clip="adaptive:0.5", clip_start=0.1).privacy.initial_clip == 0.1
    assert config(noise_multiplier=1.0, clip="2").privacy.initial_clip == 2.0
    with pytest.raises(ConfigError, match="privacy.clip_start is set but does nothing without privacy.clip=adaptive"):
        config(noise_multiplier=1.0, clip="2", clip_start=0.1)


def test_secure_aggregation_passes_a_sum_of_enough_survivors_and_loses_a_round_of_too_few():
    cfg = build_config(
        "fedvpt",
        [
            {
                "federation": {"clients": 40, "participation": 0.1},
                "privacy": {"secure_aggregation": True, "min_survivors": 3},
            }
        ],
    )
    view = CohortView(cfg, Plain())
    updates = [update(0, [2.0, 1.0]), update(1, [1.0, 3.0]), update(2, [1.0, 1.0])]
    assert view.view(1, STATE, updates, 1.0) == (updates, {})
    assert view.view(1, STATE, updates[:2], 1.0) == ([], {"secagg_lost": 1.0})


def test_the_clients_noise_of_n_survivors_is_the_servers_times_sqrt_n_over_t():
    """Distributed DP: each client adds N(0, (z C)^2 / t), t = min_survivors; the sum of n >= t holds n / t of the
    central variance (the same draw here, scaled)."""
    secure = {"noise_multiplier": 2.0, "clip": "0.5", "secure_aggregation": True, "min_survivors": 2}
    central = CohortView(config(**secure), Plain())
    distributed = CohortView(config(**secure, noise_by="clients"), Plain())
    big = GlobalState({"w": torch.zeros(100_000)})
    unmoved = [ClientUpdate(c, 10, {"w": torch.zeros(100_000)}, {}) for c in range(3)]  # clipped deltas of 0: noise
    [server], _ = central.view(3, big, unmoved, 0.5)
    [clients], _ = distributed.view(3, big, unmoved, 0.5)
    assert torch.allclose(clients.params["w"], server.params["w"] * math.sqrt(3 / 2), rtol=1e-6, atol=0)
    assert (clients.params["w"] * 4).std().item() == pytest.approx(2.0 * 0.5 * math.sqrt(3 / 2), rel=0.01)
    [just_t], _ = distributed.view(3, big, unmoved[:2], 0.5)  # n = t: exactly the central noise
    [server_t], _ = central.view(3, big, unmoved[:2], 0.5)
    assert torch.equal(just_t.params["w"], server_t.params["w"])
