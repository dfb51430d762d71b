"""FedAvg written out by hand (McMahan et al., AISTATS 2017, Algorithm 1), the reference the engine is held to
(tests/engine/test_reference_loop.py) and the plain loop that bench/scale.py times against raysim. It shares only
raysim's model, its seed function and its client sampling; none of the engine or ``core.training``: torch.optim,
torch.randperm batches and a float64 size-weighted mean, as a reader of the paper would write them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from raysim.base.preprocess import to_model_input
from raysim.base.seeding import Purpose, derive_seed, sample_clients

# client id -> (its train images uint8 [n, H, W, 3], its labels [n])
ClientRows = Callable[[int], tuple[np.ndarray, np.ndarray]]


def fedavg_rounds(
    model,
    client_rows: ClientRows,
    state: dict[str, torch.Tensor],
    *,
    clients: int,
    per_round: int,
    rounds: int,
    seed: int,
    batch_size: int,
    optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
) -> Iterator[dict[str, torch.Tensor]]:
    """The global trainable tensors after each round: the sampled clients start from them, take one epoch of
    minibatch steps in the order their (round, client) seed shuffles, and the server averages them by rows."""
    params = dict(model.named_parameters())
    names = model.trainable_names()
    size, mean, std = model.input_spec
    for round in range(1, rounds + 1):
        updates, sizes = [], []
        for client in sample_clients(seed, round, list(range(clients)), per_round):
            images, labels = client_rows(client)
            with torch.no_grad():
                for name in names:
                    params[name].copy_(state[name])
            step = optimizer([params[name] for name in names])
            generator = torch.Generator().manual_seed(derive_seed(seed, Purpose.CLIENT, round, client))
            model.train()
            for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
                x = to_model_input(torch.tensor(images[batch.numpy()]), size, mean, std)
                loss = torch.nn.functional.cross_entropy(model(x), torch.tensor(labels[batch.numpy()]))
                step.zero_grad(set_to_none=True)
                loss.backward()
                step.step()
            model.eval()
            updates.append({name: params[name].detach().clone() for name in names})
            sizes.append(len(labels))
        weights = torch.tensor(sizes, dtype=torch.float64) / sum(sizes)
        state = {
            name: torch.tensordot(weights, torch.stack([u[name].double() for u in updates]), 1).float()
            for name in names
        }
        yield state
