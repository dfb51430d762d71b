"""The personalised baselines' formulas on tiny tensors: Fed-RoD's balanced softmax loss and its one head g + p,
and which model Ditto evaluates a client with; a personalised run's generic accuracy (its global model's)."""

from __future__ import annotations

import math

import pytest
import torch

from raysim.algorithms.ditto.method import Ditto
from raysim.algorithms.fedrod.method import FedRoD, balanced_softmax_loss
from raysim.config import build_config
from raysim.testing.smoke import FAST, run_rounds


def test_balanced_softmax_adds_the_clients_log_label_frequencies_to_the_logits():
    logits, labels = torch.zeros(1, 2), torch.tensor([0])
    # counts 3 and 1: logits + log(3/4, 1/4), so the loss is -log(0.75 / (0.75 + 0.25))
    assert balanced_softmax_loss(logits, labels, torch.tensor([3.0, 1.0])).item() == pytest.approx(-math.log(0.75))
    # a class the client lacks enters at log(1e-8), not -inf: the loss is log(1 + 1e-8), finite (0 in float32)
    lacking = balanced_softmax_loss(logits, labels, torch.tensor([2.0, 0.0])).item()
    assert math.isfinite(lacking) and lacking == pytest.approx(math.log1p(1e-8), abs=1e-7)
    assert balanced_softmax_loss(logits, torch.tensor([1]), torch.tensor([2.0, 0.0])).item() == pytest.approx(
        -math.log(1e-8), rel=1e-6
    )  # the lacking class as the label: -log(1e-8 / (1 + 1e-8))


def test_fedrod_evaluates_with_one_head_the_sum_of_the_generic_and_the_personal():
    view = {"vit.head.weight": torch.ones(2, 3), "vit.head.bias": torch.tensor([1.0, 2.0]), "p": torch.zeros(1)}
    state = {"rod.weight": torch.full((2, 3), 0.5), "rod.bias": torch.tensor([-1.0, 1.0])}
    folded = FedRoD.eval_params(None, view, state)
    assert torch.equal(folded["vit.head.weight"], torch.full((2, 3), 1.5))
    assert torch.equal(folded["vit.head.bias"], torch.tensor([0.0, 3.0])) and folded["p"] is view["p"]
    assert FedRoD.eval_params(None, view, None) is view  # a client never sampled: the generic model


def test_ditto_evaluates_with_the_personal_model_once_a_client_has_one():
    shared, personal = {"w": torch.zeros(1)}, {"w": torch.ones(1)}
    assert Ditto.eval_params(None, shared, personal) is personal
    assert Ditto.eval_params(None, shared, None) is shared


def test_a_personalised_run_reports_its_global_models_accuracy_beside_its_clients_own():
    """Ditto's global model w is trained as FedAvg's (Li et al. 2021, Alg. 1: the personal v never feeds w), so
    its generic_acc, the global model on the clients' rows, is FedAvg's global_acc round by round, while its
    global_acc evaluates each client with its own v."""
    setting = {k: v for k, v in FAST.items() if k != "fedvpt"}
    sgd = {"train": {"optimizer": "sgd", "lr": 1e-3}, "resources": {"backend": "sequential"}}
    runs = {m: run_rounds(build_config(m, [setting, sgd]))[1] for m in ("fedavg", "ditto")}
    fedavg = [r.metrics["global_acc"] for r in runs["fedavg"]]
    assert [r.metrics["generic_acc"] for r in runs["ditto"]] == pytest.approx(fedavg) and len(set(fedavg)) > 1
    assert [r.metrics["global_acc"] for r in runs["ditto"]] != pytest.approx(fedavg)
    assert not any("generic_acc" in r.metrics for r in runs["fedavg"])


def test_dittos_client_is_charged_both_of_its_passes_on_the_virtual_clock():
    """Ditto's client trains the global model's copy and then its personal model over the same rows: at 1 sample a
    second, without link costs, its rounds last twice FedAvg's."""
    setting = {k: v for k, v in FAST.items() if k != "fedvpt"}
    clocked = {"resources": {"backend": "sequential"}, "systems": {"speed": "1"}, "federation": {"rounds": 2}}
    runs = {m: run_rounds(build_config(m, [setting, clocked]))[1] for m in ("fedavg", "ditto")}
    fedavg = [r.metrics["round_sim_s"] for r in runs["fedavg"]]
    assert [r.metrics["round_sim_s"] for r in runs["ditto"]] == pytest.approx([2 * s for s in fedavg]) and fedavg[0]
