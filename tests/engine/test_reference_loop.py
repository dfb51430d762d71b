"""The engine against FedAvg written out by hand (McMahan et al., AISTATS 2017, Algorithm 1): a FedVPT run's global
prompts and head after 2 rounds equal those of a loop that only shares the run's model, shards and seeds. It pins
what no formula test sees: which clients a round samples, the batches each trains on, the fresh optimiser per
round, and the data-size-weighted mean. The Ray backend gives the sequential one's numbers (tests/actors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raysim.core.registry import get_method
from raysim.core.seeding import Purpose, derive_seed, sample_clients
from raysim.models.factory import build_model
from raysim.models.preprocess import to_model_input
from raysim.testing.smoke import prepared, run_rounds, smoke_config

OPTIMIZERS = {
    "sgd": lambda params, t: torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay),
    "adamw": lambda params, t: torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay),
}


def fedavg_by_hand(config, initial, shards) -> dict[str, torch.Tensor]:
    """Algorithm 1: each round, the sampled clients start from the global tensors, take one epoch of minibatch
    steps in the order their (round, client) seed shuffles, and the server averages them weighted by rows."""
    model = build_model(config, get_method(config.method).cls(config), shards.info.num_classes)
    params = dict(model.named_parameters())
    names = model.trainable_names()
    size, mean, std = model.input_spec
    fed, train = config.federation, config.train
    state = {name: tensor.clone() for name, tensor in initial.params.items()}
    for round in range(1, fed.rounds + 1):
        updates, rows = [], []
        for client in sample_clients(fed.seed, round, list(range(fed.clients)), fed.clients_per_round):
            data = shards.train(client)
            with torch.no_grad():
                for name in names:
                    params[name].copy_(state[name])
            optimizer = OPTIMIZERS[train.optimizer]([params[name] for name in names], train)
            order = torch.randperm(
                len(data), generator=torch.Generator().manual_seed(derive_seed(fed.seed, Purpose.CLIENT, round, client))
            )
            model.train()
            for batch in order.split(train.batch_size):
                x = to_model_input(torch.tensor(data.images[batch.numpy()]), size, mean, std)
                loss = torch.nn.functional.cross_entropy(model(x), torch.tensor(data.labels[batch.numpy()]))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            updates.append({name: params[name].detach().clone() for name in names})
            rows.append(len(data))
        weights = np.asarray(rows, dtype=np.float64) / sum(rows)
        state = {name: sum(float(w) * u[name].double() for w, u in zip(weights, updates)).float() for name in names}
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
