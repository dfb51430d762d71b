"""The seeds' baselines (FedMix, FedSAM, MOON, HarmoFL, pFedHN, pFedPG, FedEM, FedPR, Fed-DualPrompt): each one's
mechanism on the tiny setting; the fairness baselines' (q-FFL, AFL, TERM) options on tiny tensors; their formulas
are tested in tests/ops."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysim.base.errors import ConfigError
from raysim.config import build_config
from raysim.core.messages import ClientUpdate, GlobalState
from raysim.core.registry import get_method
from raysim.ops.nullspace import null_space_projector
from raysim.ops.reweighting import afl_lambda_step
from raysim.testing.smoke import open_simulation, run_rounds, smoke_config


def rounds(method: str, *layers: dict):
    """(simulation's states after each round, the updates of each round) of a 2-round tiny run."""
    states, updates = [], []
    with open_simulation(smoke_config(method, *layers)) as (simulation, initial, _):
        states.append(initial)
        original = simulation.method.aggregate

        def keep(round, state, received):
            updates.append(received)
            return original(round, state, received)

        simulation.method.aggregate = keep
        for r in (1, 2):
            simulation.run_round(r)
            states.append(simulation.state)
        return states, updates, dict(simulation.clients), simulation.method


@pytest.mark.parametrize("method, off", [("fedsam", {"rho": 0.0}), ("moon", {"mu": 0.0}), ("fedmix", {"lam": 0.0})])
def test_with_its_term_off_a_baseline_is_fedvpt(method, off):
    _, _, plain = run_rounds(smoke_config("fedvpt", {"train": {"precision": "fp32"}}))
    _, _, same = run_rounds(smoke_config(method, {method: off, "train": {"precision": "fp32"}}))
    for key in plain.params:
        assert torch.allclose(plain.params[key], same.params[key], atol=1e-6), key


def test_fedmix_shares_each_clients_means_once():
    states, updates, client_states, _ = rounds("fedmix")
    senders = [u.client_id for round_updates in updates for u in round_updates if "data_mean" in u.extras]
    assert len(senders) == len(set(senders)) == len(client_states)  # once each, by every client that took part
    server = states[-1].server
    assert server["clients_shared"].item() == len(senders)
    assert server["label_mean_sum"].sum().item() == pytest.approx(len(senders))  # label distributions sum to 1


def test_harmofl_swaps_the_amplitude_in_pixel_space_so_every_image_takes_the_global_mean_intensity():
    """Two flat images of pixel means 0.49 and 0.51 and the global DC amplitude of their mean, 0.5 (window 0: the
    DC term alone): both become 0.5 in pixels, 0 as the backbone's input (mean = std = 0.5). On the normalised input
    the DC phase is the sign of -0.02 and +0.02, and the swap would give -0.5 and +0.5 instead."""
    harmofl = get_method("harmofl").cls(build_config("harmofl", [{"harmofl": {"window": 0.0}}]))
    model = SimpleNamespace(input_spec=(4, (0.5,) * 3, (0.5,) * 3), extra={"amplitude": torch.full((3, 4, 4), 8.0)})
    pixels = torch.stack([torch.full((3, 4, 4), 0.49), torch.full((3, 4, 4), 0.51)])  # DC amplitude 0.5 * 16 = 8
    out = harmofl.normalised(model, (pixels - 0.5) / 0.5)
    assert torch.allclose(out, torch.zeros_like(out), atol=1e-6)


def test_harmofl_s_amplitude_statistic_is_taken_in_pixel_space():
    """Rows of pixel value 51 (0.2) and 204 (0.8) as a backbone with mean = std = 0.5 sees them (-0.6, +0.6): the
    mean DC amplitude is H * W * 0.5, the mean intensity, where the normalised input's would be H * W * 0.6."""
    from raysim.algorithms.harmofl.method import own_amplitude
    from raysim.data.shards import ClientData

    model = SimpleNamespace(input_spec=(4, (0.5,) * 3, (0.5,) * 3))
    images = np.stack([np.full((4, 4, 3), 51, np.uint8), np.full((4, 4, 3), 204, np.uint8)])
    data = ClientData(images, np.zeros(2, np.int64), np.zeros(2, np.int64))
    dc = own_amplitude(model, data, torch.device("cpu"))[:, 0, 0]
    assert torch.allclose(dc, torch.full((3,), 16 * 0.5, dtype=dc.dtype), atol=1e-5)


def test_harmofl_forms_the_global_amplitude_once_then_keeps_it():
    states, updates, _, _ = rounds("harmofl", {"harmofl": {"window": 0.0}})
    amp = "extra.amplitude"
    assert not states[0].params[amp].any()
    first = updates[0]
    total = sum(u.num_samples for u in first)
    expected = sum(u.num_samples * u.params[amp].double() for u in first) / total
    assert torch.allclose(states[1].params[amp].double(), expected, atol=1e-5)
    assert torch.equal(states[2].params[amp], states[1].params[amp])
    assert all(torch.equal(u.params[amp], states[1].params[amp]) for u in updates[1])  # the global one, echoed


@pytest.mark.parametrize(
    "layer, fix",
    [
        ({"federation": {"mode": "async"}, "systems": {"speed": "lognormal:3,0.5"}}, "use federation.mode=sync"),
        ({"compression": {"uplink": "topk:0.05"}}, "unset compression.*"),
        ({"compression": {"downlink": "qsgd:8"}}, "unset compression.*"),
    ],
)
def test_harmofl_refuses_what_would_blend_or_encode_its_amplitude_as_an_update(layer, fix):
    """The amplitude is set once to the first cohort's mean: a FedAsync blend would keep a scaled copy of it, a
    top-k delta a sparsified one, for the rest of the run."""
    with pytest.raises(ConfigError) as error:
        build_config("harmofl", [layer])
    assert str(error.value).startswith("harmofl sets a tensor once and keeps it (the amplitude, the first cohort's")
    assert str(error.value).endswith(f"fix at the wrong value; {fix}")


def test_pfedhn_sends_each_client_its_own_tensors_and_steps_the_embeddings_of_those_that_trained():
    states, updates, client_states, method = rounds("pfedhn")
    broadcast = method.configure(3, states[-1], [0, 1])
    assert broadcast.params == {} and set(broadcast.instructions) == {0, 1}
    assert not torch.equal(broadcast.instructions[0]["vit.head.weight"], broadcast.instructions[1]["vit.head.weight"])
    before, after = states[0].server["hn.embeddings"], states[1].server["hn.embeddings"]
    moved = (after - before).norm(dim=1)
    trained = [u.client_id for u in updates[0]]
    idle = [c for c in range(len(moved)) if c not in trained]
    assert moved[trained].min() > moved[idle].max()  # others only decay (weight decay)
    assert set(client_states) == {u.client_id for r in updates for u in r}
    assert torch.equal(
        method.eval_params(states[-1].params, client_states[trained[0]])["vit.head.bias"],
        client_states[trained[0]]["vit.head.bias"],
    )


def test_pfedhn_evaluates_a_client_that_trained_with_what_its_hypernetwork_generates_for_it_now():
    states, _, client_states, method = rounds("pfedhn")
    trained, seen = sorted(client_states), states[-1].server["participated"]
    others = [c for c in range(len(seen)) if c not in client_states]
    assert others and seen[trained].all() and not seen[others].any()
    evaluated = method.evaluated_states(states[-1], trained + others, client_states)
    now = method.configure(3, states[-1], trained).instructions  # h(v_i; phi), as each would receive it now
    assert set(evaluated) == set(trained)  # the others: the global parameters, h at the mean embedding
    for c in trained:
        assert all(torch.equal(evaluated[c][k], now[c][k]) for k in now[c])
        assert not torch.equal(evaluated[c]["vit.head.weight"], client_states[c]["vit.head.weight"])
    as_trained = type(method)(smoke_config("pfedhn", {"pfedhn": {"evaluate": "trained"}}))
    assert as_trained.evaluated_states(states[-1], trained, client_states) is client_states


def test_pfedhns_evaluation_reads_the_generated_models_in_a_run_and_training_is_the_same_either_way():
    runs = {
        mode: run_rounds(smoke_config("pfedhn", {"pfedhn": {"evaluate": mode}, "federation": {"eval_every": 1}}))
        for mode in ("generated", "trained")
    }
    (_, generated, g_final), (_, trained, t_final) = runs["generated"], runs["trained"]
    assert all(torch.equal(g_final.server[k], t_final.server[k]) for k in g_final.server)
    assert [r.client_acc for r in generated] != [r.client_acc for r in trained]


def test_pfedpg_heads_stay_personal_and_prompts_come_from_the_generator():
    states, updates, client_states, method = rounds("pfedpg")
    broadcast = method.configure(3, states[-1], [0, 1])
    assert set(broadcast.params) == {"vit.head.weight", "vit.head.bias"}
    assert set(broadcast.instructions[0]) == {"prompts.shallow"}
    a, b = sorted(client_states)[:2]
    assert not torch.equal(client_states[a]["vit.head.weight"], client_states[b]["vit.head.weight"])
    assert not torch.equal(states[1].server["gen.base"], states[0].server["gen.base"])


def test_pfedpg_steps_the_generator_towards_the_prompt_a_client_trained():
    """dP = P - P~ (generated minus trained) is the generator's gradient: one server step brings the client's
    generated prompt nearer the prompt it trained, never away from it."""
    states, _, _, method = rounds("pfedpg")
    state, client = states[-1], 0
    generated = method.configure(3, state, [client]).instructions[client]["prompts.shallow"]
    trained = generated + 0.1 * torch.randn(generated.shape, generator=torch.Generator().manual_seed(0))
    head = {k: state.params[k] for k in ("vit.head.weight", "vit.head.bias")}
    after = method.aggregate(3, state, [ClientUpdate(client, 4, {"prompts.shallow": trained, **head})])
    moved = method.configure(4, after, [client]).instructions[client]["prompts.shallow"]
    assert (moved - trained).norm() < (generated - trained).norm()


def test_fedem_clients_keep_mixture_weights_and_predict_with_them():
    states, _, client_states, method = rounds("fedem")
    weights = torch.stack([s["extra.mixture"] for s in client_states.values()])
    assert torch.allclose(weights.sum(dim=1), torch.ones(len(weights)))
    assert torch.equal(states[-1].params["extra.mixture"], torch.full((3,), 1 / 3))  # the prior never moves
    own = method.eval_params(states[-1].params, next(iter(client_states.values())))
    assert torch.equal(own["extra.prompts_0"], states[-1].params["extra.prompts_0"])
    assert not torch.equal(own["extra.mixture"], states[-1].params["extra.mixture"])


def test_fedpr_updates_leave_the_global_prompts_top_directions_alone():
    states, updates, _, _ = rounds("fedpr", {"fedpr": {"ratio": 0.5}})
    received = states[1].params["prompts.shallow"][0]  # what round 2's clients started from
    protected = torch.linalg.svd(received.double().T @ received.double()).U[:, : received.shape[1] // 2]
    for update in updates[1]:
        change = update.params["prompts.shallow"][0].double() - received.double()
        assert change.norm() > 0 and (change @ protected).abs().max() < 1e-5
    assert null_space_projector(received, 0.5).shape == (received.shape[1],) * 2
    round_one = updates[0][0].params["prompts.shallow"][0].double() - states[0].params["prompts.shallow"][0].double()
    first = states[0].params["prompts.shallow"][0].double()
    top = torch.linalg.svd(first.T @ first).U[:, :1]
    assert (round_one @ top).abs().max() > 1e-6  # round 1 is not projected


@pytest.mark.parametrize("pull, keys_move", [(0.0, False), (1.0, True)])
def test_fed_dualprompt_keys_learn_only_from_the_matching_loss(pull, keys_move):
    layers = {"fed-dualprompt": {"pull": pull}, "train": {"weight_decay": 0.0}}
    initial, _, final = run_rounds(smoke_config("fed-dualprompt", layers))
    keys = "extra.prompt_keys"
    assert torch.equal(initial.params[keys], final.params[keys]) is not keys_move
    assert not torch.equal(initial.params["extra.expert_prompts"], final.params["extra.expert_prompts"])


@pytest.mark.parametrize(
    "method, option, message",
    [
        ("fedmix", {"lam": 1.0}, "fedmix.lam=1.0 must be in [0, 1)"),
        ("fedsam", {"rho": -1}, "fedsam.rho=-1.0 must be >= 0"),
        ("moon", {"tau": 0}, "moon.tau=0.0 must be > 0"),
        ("harmofl", {"window": 0.7}, "harmofl.window=0.7 must be in [0, 0.5]"),
        ("pfedhn", {"hidden_layers": -1}, "pfedhn.hidden_layers=-1 must be >= 0"),
        ("pfedpg", {"server_lr": 0}, "pfedpg.server_lr=0.0 must be > 0"),
        ("fedem", {"components": 0}, "fedem.components=0 must be at least 1"),
        ("fedpr", {"ratio": 0}, "fedpr.ratio=0.0 must be in (0, 1]"),
        ("fed-dualprompt", {"expert_length": 0}, "fed-dualprompt.expert_length=0 must be at least 1"),
    ],
)
def test_bad_options_are_one_line_naming_the_key(method, option, message):
    with pytest.raises(ConfigError) as error:
        build_config(method, [{method: option}])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "layer, lipschitz",
    [
        ({"train": {"optimizer": "sgd", "lr": 0.01}}, 100.0),  # q-FFL: local SGD of step 1 / L
        ({"train": {"optimizer": "adamw", "lr": 1e-3}}, 1000.0),  # FedGCR's comparison: 1 / its AdamW lr
        ({"train": {"optimizer": "adamw"}, "qffl": {"lipschitz": 5.0}}, 5.0),  # set: taken as it is
    ],
)
def test_qffl_lipschitz_resolves_from_the_learning_rate_unless_set(layer, lipschitz):
    method = get_method("qffl").cls(build_config("qffl", [layer]))
    resolved = method.resolved_options(4)
    assert resolved.lipschitz == pytest.approx(lipschitz) and method.lipschitz == pytest.approx(lipschitz)


def two_clients(method: str, options: dict):
    """``method`` on 2 clients (all every round) aggregating models w = 1 (1 row, loss 2) and w = 0 (3 rows, loss
    0): the new global w and server state, from w = 0 and the initial lambda (AFL's ascent: uniform)."""
    config = build_config(method, [{"federation": {"clients": 2, "participation": 1.0}, method: options}])
    instance = get_method(method).cls(config)
    ascent = options.get("lambda_step") == "ascent"
    server = {"afl_lambda": torch.tensor([0.5, 0.5], dtype=torch.float64)} if ascent else {}
    updates = [
        ClientUpdate(0, 1, {"w": torch.tensor([1.0])}, metrics={"global_loss": 2.0}),
        ClientUpdate(1, 3, {"w": torch.tensor([0.0])}, metrics={"global_loss": 0.0}),
    ]
    after = instance.aggregate(1, GlobalState({"w": torch.zeros(1)}, server), updates)
    return after.params["w"].item(), after.server


def test_afl_ascent_averages_with_the_old_lambda_then_ascends_it():
    w, server = two_clients("afl", {"lambda_step": "ascent", "lambda_lr": 0.1})
    assert w == pytest.approx(0.5)  # lambda [0.5, 0.5]
    assert server["afl_lambda"].tolist() == pytest.approx([0.6, 0.4])  # Proj([0.5 + 0.1 * 2, 0.5]) = [0.7, 0.5] - 0.1


def test_afl_ascent_keeps_the_model_where_the_sampled_clients_have_no_lambda():
    """lambda [0, 0, 1] (partial participation moved the mass to client 2), clients 0 and 1 sampled: the paper's
    model step sum_k lambda_k grad F_k is 0, so w stays 0 instead of their uniform average 0.5; lambda still
    ascends, by M / m = 3 / 2 times the step."""
    federation = {"clients": 3, "participation": 0.67}
    config = build_config("afl", [{"federation": federation, "afl": {"lambda_step": "ascent", "lambda_lr": 0.1}}])
    server = {"afl_lambda": torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)}
    updates = [
        ClientUpdate(0, 1, {"w": torch.tensor([1.0])}, metrics={"global_loss": 2.0}),
        ClientUpdate(1, 3, {"w": torch.tensor([0.0])}, metrics={"global_loss": 0.0}),
    ]
    after = get_method("afl").cls(config).aggregate(1, GlobalState({"w": torch.zeros(1)}, server), updates)
    assert after.params["w"].item() == 0.0
    # Proj([0 + 0.1 * 1.5 * 2, 0, 1]) = Proj([0.3, 0, 1]) = [0.15, 0, 0.85]
    assert after.server["afl_lambda"].tolist() == pytest.approx([0.15, 0.0, 0.85])


def test_afl_one_step_averages_with_a_projection_from_the_data_shares_and_keeps_no_lambda():
    w, server = two_clients("afl", {"lambda_step": "one-step", "lambda_lr": 0.1})
    assert w == pytest.approx(0.35)  # Proj([1/4 + 0.1 * 2, 3/4]) = [0.35, 0.65]
    assert server == {}


def test_afls_default_step_moves_a_clients_weight_by_half_its_uniform_share_per_unit_of_loss():
    w, server = two_clients("afl", {"lambda_step": "ascent"})  # M = m = 2: m / (2 M^2) = 1/4
    assert server["afl_lambda"].tolist() == pytest.approx([0.75, 0.25])  # Proj([0.5 + 0.25 * 2, 0.5])
    w, _ = two_clients("afl", {"lambda_step": "one-step"})  # 1 / (2 m) = 1/4
    assert w == pytest.approx(0.5)  # Proj([1/4 + 1/4 * 2, 3/4]) = [0.5, 0.5]
    config = build_config("afl", [{"federation": {"clients": 100, "participation": 0.1}}])
    assert get_method("afl").cls(config).resolved_options(6).lambda_lr == pytest.approx(10 / (2 * 100**2))


@pytest.mark.parametrize("lambda_lr, frozen", [(-1.0, False), (0.1, True)])
def test_afls_default_step_never_leaves_a_cohort_without_lambda_where_a_fixed_large_one_does(lambda_lr, frozen):
    """M = 100, m = 10, 40 rounds of losses in [1.5, 2.5]: at 0.1 lambda lands on one cohort and a later cohort
    holds none of it (the model would stay); the default step keeps some on every cohort."""
    config = build_config(
        "afl", [{"federation": {"clients": 100, "participation": 0.1}, "afl": {"lambda_lr": lambda_lr}}]
    )
    step, rng = get_method("afl").cls(config).lambda_lr, np.random.default_rng(0)
    lam, left_without = torch.full((100,), 0.01, dtype=torch.float64), False
    for _ in range(40):
        cohort = sorted(rng.choice(100, 10, replace=False).tolist())
        left_without |= bool(lam[cohort].sum() == 0)
        lam = afl_lambda_step(lam, cohort, rng.uniform(1.5, 2.5, 10).tolist(), step, 10.0)
    assert left_without == frozen


def test_term_default_tilt_is_terms_fair_fl_one_and_fedgcrs_tilts_less():
    assert build_config("term", []).options.tilt == 0.1
    w, _ = two_clients("term", {"tilt": 0.01})
    tilted = 0.25 * math.exp(0.01 * 2.0)  # omega_k exp(t F_k): 1/4 e^0.02 and 3/4
    assert w == pytest.approx(tilted / (tilted + 0.75))


def test_afl_lambda_step_names_its_valid_values():
    with pytest.raises(ConfigError) as error:
        build_config("afl", [{"afl": {"lambda_step": "projected"}}])
    assert str(error.value) == "afl.lambda_step='projected' is not one of ascent, one-step"
