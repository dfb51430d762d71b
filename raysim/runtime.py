"""The client side of a simulation: one process's model and shard access, running clients one by one.

A :class:`ClientRuntime` lives in each Ray ``ClientWorker`` (or in the driver for the sequential backend).
It builds the frozen model once and runs any number of virtual clients on it: a client is a row of
state, not a process (Flower's virtual client engine).
"""

from __future__ import annotations

import numpy as np
import torch

from raysim.data.shards import ClientData, ShardStore
from raysim.method import ClientContext, ClientResult, Tensors
from raysim.models.factory import build_model
from raysim.precision import autocast, full_width
from raysim.registry import get_method
from raysim.seeding import derive_seed
from raysim.split import RemoteEncoder
from raysim.train import correct_per_row

Task = tuple[int, Tensors, Tensors | None]  # (client id, per-client instructions, client state)


def pick_device() -> torch.device:
    """The GPU Ray assigned to this process, if any, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() and torch.cuda.device_count() > 0 else torch.device("cpu")


def _to_cpu(tensors: Tensors | None) -> Tensors | None:
    """Detached CPU copies; what was computed under bf16 autocast leaves the client as float32."""
    if tensors is None:
        return None
    return {k: full_width(v.detach().cpu()) for k, v in tensors.items()}


class ClientRuntime:
    """Runs client hooks of one method over the shared shards, on a model built once."""

    def __init__(self, config, shards: ShardStore, server=None):
        """``server``: split learning's encoder server (or a handle on it); the model's server blocks are dropped
        here and a :class:`~raysim.split.RemoteEncoder` runs in their place."""
        torch.set_num_threads(config.resources.torch_threads)
        self.config, self.shards = config, shards
        self.method = get_method(config.method)(config)
        self.device = pick_device()
        model = build_model(config, self.method, shards.info.num_classes)
        segment = self.method.server_segment(len(model.vit.blocks))
        if segment is not None:
            model.offload(*segment, RemoteEncoder(server))
        self.model = model.to(self.device)

    def _context(self, round: int, client_id: int, instructions: Tensors) -> ClientContext:
        seed = derive_seed(self.config.federation.seed, "client", round, client_id)
        return ClientContext(round, client_id, seed, self.model, self.device, self.config, instructions)

    def train(self, round: int, view: Tensors, tasks: list[Task]) -> list[ClientResult]:
        """Local updates of the given clients from the shared view, in the order given."""
        results = []
        for client_id, instructions, state in tasks:
            ctx = self._context(round, client_id, instructions)
            with autocast(self.device, self.config.train.precision):
                result = self.method.client_update(ctx, view, state, self.shards.train(client_id))
            result.update, result.state = _to_cpu(result.update), _to_cpu(result.state)
            results.append(result)
        return results

    def evaluate(self, view: Tensors, client_ids: list[int], states: dict[int, Tensors]) -> dict[int, tuple[int, int]]:
        """(correct, total) on each client's test rows; clients sharing the global view run as one batch."""
        out: dict[int, tuple[int, int]] = {}
        shared = []
        for client_id in client_ids:
            personal = self.method.eval_view(view, states.get(client_id))
            if personal is view:
                shared.append(client_id)
            else:
                self.model.load_trainable(personal)
                data = self.shards.test(client_id)
                out[client_id] = (int(self._correct(data).sum()), len(data))
        if shared:
            self.model.load_trainable(view)
            parts = [self.shards.test(c) for c in shared]
            owner = np.repeat(np.arange(len(shared)), [len(p) for p in parts])
            merged = ClientData.concat(parts)
            correct = self._correct(merged)
            hits = np.bincount(owner, weights=correct, minlength=len(shared)).astype(np.int64)
            out.update({c: (int(hits[i]), len(parts[i])) for i, c in enumerate(shared)})
        return out

    def _correct(self, data: ClientData) -> np.ndarray:
        """Per-row hits of the method's inference forward with the loaded tensors."""
        with autocast(self.device, self.config.train.precision):
            return correct_per_row(self.model, data, self.device,
                                   lambda x, rows: self.method.forward(self.model, x, data, rows))
