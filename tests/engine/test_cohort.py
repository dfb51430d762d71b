"""Cohort training equals the per-client loop within float tolerance, for every method registered with it; the
stacked optimiser equals torch's, client by client, including clients that skip steps; cohorts are a function of
the round alone, so backends and pool sizes train the same ones."""

from __future__ import annotations

import pytest
import torch

from raysim.config import build_config
from raysim.core.registry import METHODS
from raysim.engine.client import ClientRuntime
from raysim.engine.cohort import StackedOptimizer
from raysim.engine.cohort_plan import cohort_training, cohorts_of
from raysim.engine.setup import resolved
from raysim.testing.smoke import TINY, prepared, smoke_config

COHORT_METHODS = [name for name, info in METHODS.items() if info.cohort]


def test_the_methods_that_train_in_cohorts():
    assert {"fedvpt", "fedvpt-d", "head-tune", "fedprox", "fgpt", "fgpt-u", "sgpt"} <= set(COHORT_METHODS)
    assert not {"fedavg", "ditto", "fedgcr", "fedv", "qffl"} & set(COHORT_METHODS)  # full models, state, a loss first


@pytest.mark.parametrize("method", COHORT_METHODS)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_cohort_training_equals_the_per_client_loop(ray_session, method, optimizer):
    """In float32, whatever precision the suite forces: under bf16 autocast the cohort's batched products round
    differently from the loop's at bf16's 8 bits (AdamW then turns it into lr-sized steps: 7e-3 apart after 2
    epochs of the smoke setting, losses 6e-4 apart), so exact agreement is a float32 property."""
    train = {"optimizer": optimizer, "local_epochs": 2, "batch_size": 8, "precision": "fp32", "cohort": "on"}
    layers = {"federation": {"clients": 8}, "train": train}
    config, initial, shards = prepared(smoke_config(method, layers))
    runtime = ClientRuntime(config, shards.info.num_classes)
    broadcast = runtime.method.configure(1, initial, list(range(6)))
    tasks = [(c, {}, None) for c in range(6)]
    alone = runtime.train(1, broadcast, [[task] for task in tasks], shards)
    together = runtime.train(1, broadcast, [tasks], shards)
    for a, b in zip(alone, together):
        assert (a.client_id, a.num_samples) == (b.client_id, b.num_samples)
        assert (a.metrics["steps"], a.metrics["samples"]) == (b.metrics["steps"], b.metrics["samples"])
        assert a.metrics["train_loss"] == pytest.approx(b.metrics["train_loss"], abs=1e-4)
        assert set(a.params) == set(b.params) and set(a.extras) == set(b.extras)
        for name in a.params:
            assert torch.allclose(a.params[name], b.params[name], atol=1e-4), name
            assert not torch.equal(a.params[name], initial.params[name]) or name.startswith("extra.fixed")
        for name in a.extras:  # the selection counts: every row of every group step counted
            assert a.extras[name].sum() == b.extras[name].sum()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_stacked_optimizer_equals_torch_for_each_client_and_skips_absent_ones(optimizer):
    cfg = build_config("fedvpt", [{"train": {"optimizer": optimizer, "lr": 0.1, "weight_decay": 0.01}}]).train
    start = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    stacked = {"w": start.clone()}
    optimizer_ = StackedOptimizer(stacked, cfg)
    singles = [torch.nn.Parameter(start[c].clone()) for c in range(3)]
    from raysim.core.training import make_optimizer

    torch_optimizers = [make_optimizer([p], cfg) for p in singles]
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        members = [c for c in range(3) if not (c == 1 and step in (1, 2))]  # client 1 has no batch at steps 1, 2
        grads = torch.randn(len(members), 4, generator=generator)
        optimizer_.step(torch.tensor(members), {"w": grads})
        for g, c in zip(grads, members):
            singles[c].grad = g.clone()
            torch_optimizers[c].step()
    for c in range(3):
        assert torch.allclose(stacked["w"][c], singles[c].detach(), atol=1e-6), c


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_stacked_optimizer_keeps_its_state_on_the_tensors_device(optimizer):
    """A GPU worker's stacked tensors live on the GPU while the members index comes from the CPU; the "meta" device
    stands in for the GPU here (it refuses CPU operands as CUDA does: the first GPU run failed so)."""
    cfg = build_config("fedvpt", [{"train": {"optimizer": optimizer, "momentum": 0.9, "weight_decay": 0.01}}]).train
    stacked = {"w": torch.zeros(3, 4, device="meta")}
    optimizer_ = StackedOptimizer(stacked, cfg)
    for _ in range(2):
        optimizer_.step(torch.tensor([0, 2]), {"w": torch.ones(2, 4, device="meta")})
    assert stacked["w"].device.type == optimizer_.steps.device.type == "meta"


def test_cohorts_are_fixed_groups_of_the_round_in_order():
    config = build_config("fedvpt", [TINY, {"train": {"cohort": "on", "cohort_size": 4}}])
    tasks = [(c, {}, None) for c in (3, 5, 8, 9, 11, 12, 20)]
    assert [[t[0] for t in cohort] for cohort in cohorts_of(tasks, config)] == [[3, 5, 8, 9], [11, 12, 20]]
    off = build_config("fedvpt", [TINY, {"train": {"cohort": "off"}}])
    assert all(len(cohort) == 1 for cohort in cohorts_of(tasks, off))
    assert all(
        len(cohort) == 1 for cohort in cohorts_of(tasks, build_config("ditto", [TINY, {"train": {"cohort": "on"}}]))
    )


def test_auto_trains_in_cohorts_only_where_clients_train_on_a_gpu():
    """On CPUs a client's batch already fills the cores (measured slower in cohorts, with more memory)."""
    cpu, gpu = (resolved(build_config("fedvpt", [TINY, {"resources": {"gpus_per_client": g}}])) for g in (0.0, 0.5))
    assert (cpu.train.cohort, gpu.train.cohort) == ("off", "on")
    assert not cohort_training(cpu) and cohort_training(gpu)
    forced = resolved(build_config("fedvpt", [TINY, {"train": {"cohort": "on"}}]))
    assert forced.train.cohort == "on" and cohort_training(forced)
