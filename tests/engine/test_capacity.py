"""Capacity tiers in the engine: which rows a tier trains, that the rows it does not train enter the forward as the
broadcast's values (whatever the optimiser does to them) and are never sent, the bytes counted, the server keeping a
row nobody trained, and the same numbers on every backend (docs/systems.md)."""

from __future__ import annotations

import pytest
import torch

from raysim.base.precision import autocast
from raysim.config import build_config
from raysim.core.messages import Broadcast
from raysim.engine.capacity import tier_rows
from raysim.engine.client import ClientRuntime
from raysim.ops.aggregate import tensor_bytes
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.smoke import FAST, prepared, run_rounds

SEQUENTIAL = {"resources": {"backend": "sequential"}}


def deep(*layers):
    """VPT-deep on the nano backbone (4 blocks, a prompt row per block), AdamW with a weight decay large enough to
    move every row it touches."""
    train = {"train": {"optimizer": "adamw", "lr": 0.05, "weight_decay": 0.5, "batch_size": 8}}
    return build_config("fedvpt-d", [FAST, SEQUENTIAL, train, *layers])


@pytest.fixture(scope="module")
def runtime(ray_session):
    config, initial, shards = prepared(deep())
    return ClientRuntime(config, shards.info.num_classes), initial, shards


def test_tier_rows_mark_the_prompt_rows_of_the_tier_and_never_the_head(runtime):
    model = runtime[0].model
    assert tier_rows(model, "all") == {}
    assert tier_rows(model, "first-1")["prompts.deep"].tolist() == [True, False, False, False]
    assert tier_rows(model, "last-2")["prompts.deep"].tolist() == [False, False, True, True]
    assert tier_rows(model, "head")["prompts.deep"].tolist() == [False] * 4
    assert not any(name.startswith("vit.head.") for name in tier_rows(model, "head"))


def test_held_rows_enter_the_forward_as_loaded_whatever_happens_to_the_parameter(runtime):
    model, initial = runtime[0].model, runtime[1]
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(2, 64, generator=torch.Generator().manual_seed(1))  # not constant per token: LayerNorm
    model.load_trainable(initial.params)
    with torch.no_grad(), model.training_rows({"prompts.deep": torch.tensor([False, False, True, True])}):
        before = model(x)
        model.prompts["deep"][:2] += noise  # what weight decay would do to rows the client does not train
        assert torch.equal(model(x), before)
        model.prompts["deep"][3] += noise  # a trained row moves the output
        assert not torch.allclose(model(x), before)
        moved = {**initial.params, "prompts.deep": initial.params["prompts.deep"] + noise}
        model.load_trainable(moved)  # a new broadcast: the held rows follow it
        shifted = model(x)
    model.load_trainable(moved)
    with torch.no_grad():
        assert torch.equal(model(x), shifted)  # outside the block the parameter is the whole truth again
    assert all(p.requires_grad for name, p in model.named_parameters() if name in model.trainable_names())


@pytest.mark.parametrize("tier", ["head", "last-2"])
def test_a_tiered_client_sends_only_what_it_trained(runtime, tier):
    worker, initial, shards = runtime
    client = shards.seen_clients()[0]
    broadcast = Broadcast(initial.params)
    full = worker.train(1, broadcast, [[(client, {}, None, 1.0, "all")]], shards)[0]
    update = worker.train(1, broadcast, [[(client, {}, None, 1.0, tier)]], shards)[0]
    rows = tier_rows(worker.model, tier)["prompts.deep"]
    sent, start = update.params["prompts.deep"], initial.params["prompts.deep"]
    assert torch.equal(sent[~rows], start[~rows])  # untouched by training or weight decay
    assert (sent[rows] != start[rows]).any(dim=(1, 2)).all()
    assert not torch.equal(update.params["vit.head.weight"], initial.params["vit.head.weight"])
    assert torch.equal(update.trained["prompts.deep"], rows)
    row_bytes = start[0].numel() * start.element_size()
    assert update.bytes_up == full.bytes_up - int((~rows).sum()) * row_bytes
    head = {k: v for k, v in initial.params.items() if k.startswith("vit.head.")}
    if tier == "head":  # the same head as a client that could only ever train the head
        assert update.bytes_up == tensor_bytes(head)
        with worker.model.training_only(list(head)), autocast(worker.device, worker.config.train.precision):
            probe = worker.method.client_update(
                worker._context(1, None, client, {}), broadcast, None, shards.train(client)
            )
        assert torch.equal(update.params["vit.head.weight"], probe.params["vit.head.weight"].cpu())


def test_a_round_of_head_only_clients_leaves_the_prompts_exactly_as_they_were(ray_session):
    initial, reports, final = run_rounds(deep({"systems": {"tiers": "head"}, "federation": {"rounds": 1}}))
    assert torch.equal(final.params["prompts.deep"], initial.params["prompts.deep"])
    assert not torch.equal(final.params["vit.head.weight"], initial.params["vit.head.weight"])
    assert reports[0].metrics["tiered_updates"] == 5


def test_tiered_runs_give_the_same_numbers_on_ray_as_sequentially(ray_session):
    tiers = {"systems": {"tiers": "head,first-1,last-2,all"}}
    on_ray = {"resources": {"backend": "ray", "workers": 2, "cpus_per_client": 0.5}}
    (_, seq, seq_final), (_, par, par_final) = run_rounds(deep(tiers)), run_rounds(deep(tiers, on_ray))
    assert sum(r.metrics["tiered_updates"] for r in seq) > 0
    for a, b in zip(seq, par):
        assert {k: v for k, v in a.metrics.items() if k not in TIMING_KEYS} == pytest.approx(
            {k: v for k, v in b.metrics.items() if k not in TIMING_KEYS}, abs=1e-6
        )
    for name, tensor in seq_final.params.items():
        assert torch.allclose(tensor, par_final.params[name], atol=1e-6), name
