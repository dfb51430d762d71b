"""Every registered method runs (parametrised over the registry), plus the baselines' own formulas."""

from __future__ import annotations

import math
import re
import time
import warnings

import pytest
import torch

from raysim.core.protocol import ResolvesOptions, SendsExtras, SplitLearning
from raysim.core.registry import METHODS, get_method
from raysim.ops.aggregate import tensor_bytes
from raysim.ops.metrics import TIMING_KEYS, reported_metrics
from raysim.testing.smoke import prepared, run_rounds, smoke_config

ELEMENT_BYTES = {"selection_counts": 8}  # N_g^i counts in float64; every other extra is float32


def extra_bytes(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(ELEMENT_BYTES.get(name, 4) * math.prod(shape) for name, shape in shapes.items())


NOISE = re.compile(r"warn|error", re.IGNORECASE)
HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)  # as Python's
LOG_LAG_S = 1.0  # Ray forwards a worker's lines to the driver through its log monitor, within a second
ON_RAY = {"resources": {"backend": "ray", "workers": 1, "cpus_per_client": 0.5}}


def quietly(capfd, run, lag_s: float = 0.0):
    """``run()``'s result; fails if anything it printed (here, and, within ``lag_s``, in Ray's workers, whose lines Ray
    forwards here) or a warning it raised here that Python shows a user by default matches warn|error."""
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        result = run()
    time.sleep(lag_s)
    out, err = capfd.readouterr()
    noisy = [line for line in (out + err).splitlines() if NOISE.search(line)]
    noisy += [f"{w.category.__name__}: {w.message}" for w in raised if not issubclass(w.category, HIDDEN_BY_DEFAULT)]
    assert not noisy, "\n".join(noisy)
    return result


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_quietly_alike_on_both_backends_and_reports_the_shared_metrics(ray_session, capfd, method):
    """Every registered method on its tiny setting (``smoke_config``): the sequential backend and a Ray pool give the
    same numbers, neither prints a line matching warn|error (the Ray workers' included), and the shared metrics and
    byte counts are as declared."""
    config = smoke_config(method)
    initial, reports, final = quietly(capfd, lambda: run_rounds(config))
    _, on_ray, final_on_ray = quietly(capfd, lambda: run_rounds(smoke_config(method, ON_RAY)), LOG_LAG_S)
    for here, there in zip(reports, on_ray, strict=True):
        numbers = {k: v for k, v in here.metrics.items() if k not in TIMING_KEYS}
        assert {k: v for k, v in there.metrics.items() if k not in TIMING_KEYS} == pytest.approx(numbers, abs=1e-6)
    for name, tensor in final.params.items():
        assert torch.allclose(final_on_ray.params[name], tensor, rtol=0, atol=1e-6), name
    assert set(final.params) == set(initial.params)
    assert any(not torch.equal(final.params[k], initial.params[k]) for k in initial.params)
    method_obj = get_method(method).cls(config)
    broadcast = method_obj.configure(1, initial, reports[0].sampled)
    # down: params and extras (e.g. SGPT's q shares) to every client, plus its instructions (pFedHN's generated tensors)
    own = max((tensor_bytes(t) for t in broadcast.instructions.values()), default=0)
    down = tensor_bytes(broadcast.params) + tensor_bytes(broadcast.extras) + own
    # up: the parameters and every declared extra, those sent once (FedMix's data means) on first participations only
    extras = method_obj.uplink_extras(initial) if isinstance(method_obj, SendsExtras) else {}
    assert set(extras) <= set(getattr(method_obj, "extras_sent", {}))  # every channel declared (raysim.privacy)
    once = {n: shape for n, shape in extras.items() if n in method_obj.sent_once}
    up = tensor_bytes(initial.params) + extra_bytes({n: s for n, s in extras.items() if n not in once})
    joined: set[int] = set()
    for report in reports:
        m = report.metrics
        first = len(set(report.sampled) - joined)
        joined |= set(report.sampled)
        if not isinstance(
            method_obj, SplitLearning
        ):  # split learning counts activations (tests/algorithms/test_fedv.py)
            assert m["bytes_up"] == pytest.approx(3 * up + first * extra_bytes(once))
            if get_method(method).family != "domain":  # from round 2 FedGCR also sends the centres H and a cluster id
                assert m["bytes_down"] == pytest.approx(3 * down)
        assert {
            "global_acc",
            "local_acc",
            "worst_local_acc",
            "sigma_client",
            "round_time_s",
            "train_samples_per_s",
        } <= set(m)
        assert 0.0 <= m["worst_local_acc"] <= m["local_acc"] <= 100.0
        assert set(m) <= reported_metrics(get_method(method))  # what `raysim tune --metric` accepts is complete


@pytest.mark.parametrize("method", list(METHODS))
def test_registration_declares_what_the_engine_and_cli_need(method):
    info = get_method(method)
    assert info.cls.info is info and info.name == method
    assert info.description and info.family
    assert info.bf16 or info.fp32_reason  # a method that refuses bf16 says why


@pytest.mark.parametrize(
    "method, must_have, must_not_have",
    [
        ("head-tune", {"vit.head.weight"}, {"prompts.shallow", "vit.blocks.0.attn.qkv.weight"}),
        ("fedvpt", {"vit.head.weight", "prompts.shallow"}, {"vit.blocks.0.attn.qkv.weight"}),
        ("fedvpt-d", {"vit.head.weight", "prompts.deep"}, {"vit.blocks.0.attn.qkv.weight"}),
        ("fedavg", {"vit.head.weight", "vit.blocks.0.attn.qkv.weight", "vit.patch_embed.proj.weight"}, set()),
    ],
)
def test_each_method_communicates_exactly_its_trainable_tensors(ray_session, method, must_have, must_not_have):
    config = smoke_config(method)
    _, state, _ = prepared(config)
    assert must_have <= set(state.params) and not (must_not_have & set(state.params))


RESOLVED_ON_NANO = {  # 4 blocks: the paper's layouts scaled, the last block's query, 1 / lr
    "sgpt": {"shared_blocks": (0,), "group_blocks": (1,), "select_layer": 4},
    "fgpt": {"group_block": 2, "select_layer": 4},
    "fgpt-u": {"group_block": 2, "select_layer": 4},
    "qffl": {"lipschitz": 1 / 3e-3},
    "pfedhn": {"embed_dim": 2},  # 1 + clients / 4, with the smoke config's 6 clients
    "afl": {"lambda_lr": 3 / (2 * 6**2)},  # m / (2 M^2): 3 of the 6 clients a round
}


@pytest.mark.parametrize("method", [m for m in METHODS if issubclass(get_method(m).cls, ResolvesOptions)])
def test_the_run_resolves_the_options_its_method_decides_and_computes_alike(ray_session, method):
    assert method in RESOLVED_ON_NANO  # a new method that resolves options says here what they become
    config, initial, _ = prepared(smoke_config(method))
    for key, value in RESOLVED_ON_NANO[method].items():
        assert getattr(config.options, key) == pytest.approx(value), key
    again, initial_again, _ = prepared(config)  # resolving is idempotent and builds the same model
    assert again.options == config.options
    assert all(torch.equal(initial.params[k], initial_again.params[k]) for k in initial.params)


def test_deep_prompts_have_one_token_set_per_block(ray_session):
    config = smoke_config("fedvpt-d", {"fedvpt": {"prompt_length": 3}})
    _, state, _ = prepared(config)
    assert state.params["prompts.deep"].shape == (4, 3, 64)  # nano: 4 blocks, width 64


def test_proximal_term_hand_computed():
    from raysim.algorithms.fedprox.method import proximal_term

    params = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([[3.0]])}
    anchor = {"a": torch.tensor([0.0, 0.0]), "b": torch.tensor([[1.0]])}
    assert proximal_term(params, anchor).item() == pytest.approx(1 + 4 + 4)


def test_fedprox_with_mu_zero_is_fedvpt_and_mu_pulls_towards_the_global_model(ray_session):
    _, _, plain = run_rounds(smoke_config("fedvpt", {"fedvpt": {"prompt_length": 2}}))
    initial, _, prox0 = run_rounds(smoke_config("fedprox", {"fedprox": {"mu": 0.0, "prompt_length": 2}}))
    _, _, prox = run_rounds(smoke_config("fedprox", {"fedprox": {"mu": 5.0, "prompt_length": 2}}))
    for key in plain.params:
        assert torch.allclose(plain.params[key], prox0.params[key], atol=1e-6)

    def drift(state):
        return sum(((state.params[k] - initial.params[k]) ** 2).sum().item() for k in initial.params)

    assert drift(prox) < drift(prox0)


@pytest.mark.parametrize("method", ["fedavg", "fedmix", "fedpr", "fedsam", "harmofl"])
def test_the_loss_hook_is_given_the_model(method, monkeypatch):
    """``loss(model, logits, labels, broadcast)`` (the template hook): FedProx's override reads the model's tensors,
    so every client update that calls it passes the model, and a subclass that overrides it gets what it expects."""
    cls, given = get_method(method).cls, []
    hook = cls.loss

    def loss(self, model, *args):
        given.append(model)
        return hook(self, model, *args)

    monkeypatch.setattr(cls, "loss", loss)  # the sequential backend: clients train in this process
    run_rounds(smoke_config(method, {"federation": {"rounds": 1}}))
    assert given and all(isinstance(model, torch.nn.Module) for model in given)
