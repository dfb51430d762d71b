"""The engine against FedAvg written out by hand (``raysim.testing.reference``): a FedVPT run's global prompts and
head after 2 rounds equal those of a loop that only shares the run's model, shards and seeds. It pins what no
formula test sees: which clients a round samples, the batches each trains on, the fresh optimiser per round, and the
data-size-weighted mean. The Ray backend gives the sequential one's numbers (tests/actors)."""

from __future__ import annotations

import pytest
import torch

from raysim.base.seeding import sample_clients
from raysim.core.registry import get_method
from raysim.models.factory import build_model
from raysim.testing.reference import fedavg_rounds
from raysim.testing.smoke import prepared, run_rounds, smoke_config

OPTIMIZERS = {
    "sgd": lambda t: lambda p: torch.optim.SGD(p, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay),
    "adamw": lambda t: lambda p: torch.optim.AdamW(p, lr=t.lr, weight_decay=t.weight_decay),
}


def fedavg_by_hand(config, initial, shards) -> dict[str, torch.Tensor]:
    """The reference loop's global tensors after the run's rounds, from the run's initial state and shards."""
    model = build_model(config, get_method(config.method).cls(config), shards.info.num_classes)
    fed, train = config.federation, config.train

    def client_rows(client):
        data = shards.train(client)
        return data.images, data.labels

    *_, state = fedavg_rounds(
        model,
        client_rows,
        {name: tensor.clone() for name, tensor in initial.params.items()},
        clients=fed.clients,
        per_round=fed.clients_per_round,
        rounds=fed.rounds,
        seed=fed.seed,
        batch_size=train.batch_size,
        optimizer=OPTIMIZERS[train.optimizer](train),
    )
    return state


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_fedvpt_run_is_fedavg_written_out_by_hand(optimizer):
    unequal = {"data": {"partition": "dirichlet", "alpha": 0.5}}  # clients of different sizes: the weights matter
    config = smoke_config("fedvpt", unequal, {"train": {"precision": "fp32", "optimizer": optimizer, "batch_size": 8}})
    config, initial, shards = prepared(config)
    _, reports, final = run_rounds(config, shards)
    fed = config.federation
    assert [sorted(r.sampled) for r in reports] == [
        sorted(sample_clients(fed.seed, r, list(range(fed.clients)), fed.clients_per_round)) for r in (1, 2)
    ]
    expected = fedavg_by_hand(config, initial, shards)
    assert final.params.keys() == expected.keys()
    for name, tensor in expected.items():
        assert not torch.equal(tensor, initial.params[name]), f"{name} did not train"
        torch.testing.assert_close(final.params[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
