"""Every registered method runs (parametrised over the registry), plus the baselines' own formulas."""

from __future__ import annotations

import pytest
import torch

from raysim.config import build_config
from raysim.metrics import reported_metrics
from raysim.registry import get_method, load_methods
from raysim.runner import initial_state, make_simulation, prepare_shards

TINY = {"federation": {"clients": 6, "rounds": 2, "participation": 0.5, "seed": 1, "eval_every": 1},
        "data": {"dataset": "synthetic", "partition": "iid"},
        "train": {"local_epochs": 1},
        "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
        "resources": {"backend": "sequential"}}


def run_rounds(method, *layers):
    config = build_config(method, [TINY, *layers])
    initial, shards = initial_state(config, prepare_shards(config))
    simulation = make_simulation(config, shards, initial)
    reports = [simulation.run_round(r) for r in range(1, config.federation.rounds + 1)]
    return config, initial, simulation.global_state(), reports


GROUP_STATS = {"sgpt": ("selection_counts",), "fgpt": ("selection_counts",), "fgpt-u": ("selection_counts",)}
# FedGCR and its halves need client types (synthetic has 3 domains) and T' <= the 3 clients of a round
TYPED = {"data": {"partition": "domains"}, "fedgcr": {"clusters": 2}}
# split learning averages heads and tails every fedround rounds; bytes are activations (tests/algorithms/test_fedv.py)
SPLIT = {"fedv": {"fedv": {"fedround": 2}}, "fedvz": {"fedvz": {"fedround": 2}}, "festa": {"festa": {"fedround": 2}}}
LAYERS = {"fedgcr": TYPED, "fedgc": TYPED, "fedgr": TYPED, **SPLIT}
REPR_BYTES = {"fedgcr": 4 * 64, "fedgc": 4 * 64, "fedgr": 4 * 64}  # h_tilde, float32, width 64, sent with the update


@pytest.mark.parametrize("method", sorted(load_methods()))
def test_every_method_trains_and_reports_the_shared_metrics(ray_session, method):
    config, initial, final, reports = run_rounds(method, *([LAYERS[method]] if method in LAYERS else []))
    assert set(final.params) == set(initial.params)
    assert any(not torch.equal(final.params[k], initial.params[k]) for k in initial.params)
    from raysim.aggregate import tensor_bytes

    method_obj = get_method(method)(config)
    down = tensor_bytes(method_obj.configure(1, initial, [])[0])  # the parameters, plus e.g. SGPT's q shares
    # up: the parameters, plus the N_g^i counts (float64) of the group-prompt methods
    up = tensor_bytes(initial.params) + (8 * method_obj.options.groups if "selection_counts" in GROUP_STATS.get(method, ()) else 0)
    up += REPR_BYTES.get(method, 0)
    for report in reports:
        m = report.metrics
        if method not in SPLIT:
            assert m["bytes_up"] == pytest.approx(3 * up)
        if method not in ("fedgcr", "fedgc", *SPLIT):  # from round 2 those also send the centres H and a cluster id
            assert m["bytes_down"] == pytest.approx(3 * down)
        assert {"global_acc", "local_acc", "worst_local_acc", "sigma_client", "round_time_s",
                "train_samples_per_s"} <= set(m)
        assert 0.0 <= m["worst_local_acc"] <= m["local_acc"] <= 100.0
        assert set(m) <= reported_metrics(get_method(method))  # what `raysim tune --metric` accepts is complete


@pytest.mark.parametrize("method, must_have, must_not_have", [
    ("head-tune", {"vit.head.weight"}, {"prompts.shallow", "vit.blocks.0.attn.qkv.weight"}),
    ("fedvpt", {"vit.head.weight", "prompts.shallow"}, {"vit.blocks.0.attn.qkv.weight"}),
    ("fedvpt-d", {"vit.head.weight", "prompts.deep"}, {"vit.blocks.0.attn.qkv.weight"}),
    ("fedavg", {"vit.head.weight", "vit.blocks.0.attn.qkv.weight", "vit.patch_embed.proj.weight"}, set()),
])
def test_each_method_communicates_exactly_its_trainable_tensors(ray_session, method, must_have, must_not_have):
    config = build_config(method, [TINY])
    state, _ = initial_state(config, prepare_shards(config))
    assert must_have <= set(state.params) and not (must_not_have & set(state.params))


def test_deep_prompts_have_one_token_set_per_block(ray_session):
    config = build_config("fedvpt-d", [TINY, {"fedvpt": {"prompt_length": 3}}])
    state, _ = initial_state(config, prepare_shards(config))
    assert state.params["prompts.deep"].shape == (4, 3, 64)  # nano: 4 blocks, width 64


def test_proximal_term_hand_computed():
    from raysim.algorithms.fedprox import proximal_term

    params = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([[3.0]])}
    anchor = {"a": torch.tensor([0.0, 0.0]), "b": torch.tensor([[1.0]])}
    assert proximal_term(params, anchor).item() == pytest.approx(1 + 4 + 4)


def test_fedprox_with_mu_zero_is_fedvpt_and_mu_pulls_towards_the_global_model(ray_session):
    _, _, plain, _ = run_rounds("fedvpt", {"fedvpt": {"prompt_length": 2}})
    _, initial, prox0, _ = run_rounds("fedprox", {"fedprox": {"mu": 0.0, "prompt_length": 2}})
    _, _, prox, _ = run_rounds("fedprox", {"fedprox": {"mu": 5.0, "prompt_length": 2}})
    for key in plain.params:
        assert torch.allclose(plain.params[key], prox0.params[key], atol=1e-6)

    def drift(state):
        return sum(((state.params[k] - initial.params[k]) ** 2).sum().item() for k in initial.params)

    assert drift(prox) < drift(prox0)
