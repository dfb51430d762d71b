"""Compressed broadcasts (``compression.downlink``): the server sends its model's updates encoded, and clients train
from the model those updates build.

The server keeps, beside its model x_t, the public model x^_t that a client holding every broadcast so far has.
After each server step it encodes x_{t+1} - x^_t per tensor (:mod:`raysim.ops.compression`) and sets x^_{t+1} =
x^_t + decoded: what the encoding lost stays in x_{t+1} - x^_{t+1} and goes out with the next update, which is error
feedback on the server (bidirectional compression with a server-side residual: Tang et al., "DoubleSqueeze", ICML
2019; Philippenko & Dieuleveut, "Artemis", 2020). Clients receive x^ in place of x, and the server moves each
update onto its own model before its step (x + (x_i - x^): the client's delta, as FedBuff moves a stale one), so
the residual is never lost.

A client downloads the encoded updates since its last download, or the whole model (4 bytes a number) when that is
smaller or it never downloaded: ``bytes_down`` and the virtual clock charge that. The public model, each client's
last download and the updates' sizes are part of a checkpoint. The encoding's draws come from (run seed, round).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from raysim.base.seeding import Purpose, derive_seed
from raysim.core.messages import Broadcast, ClientUpdate, Tensors, split_prefixed, unprefixed
from raysim.engine.buffered_step import moved
from raysim.ops.aggregate import tensor_bytes
from raysim.ops.codecs import parse
from raysim.ops.compression import decode, encode, nbytes

PREFIX = "downlink/"  # the public model and the download ledger in a checkpoint's server state
SYNCED, SENT = f"{PREFIX}synced", f"{PREFIX}sent"


def split_public(server_state: Tensors) -> tuple[Tensors, Tensors]:
    """A checkpoint's server state split into the downlink's tensors and the method's."""
    return split_prefixed(server_state, PREFIX)


class Downlink:
    """The public model x^ and who has which version of it."""

    def __init__(self, config, params: Tensors, clients: int, saved: Tensors):
        """``params``: the initial global parameters (x^_0 = x_0: every client gets the initial model whole);
        ``saved``: the downlink's tensors from the checkpoint the run starts from (empty for a new run)."""
        self.codec = parse(config.compression.downlink)
        self.seed = config.federation.seed
        model = f"{PREFIX}model/"
        self.public = unprefixed(saved, model) or {k: t.clone() for k, t in params.items()}
        # per client, the version of x^ it last downloaded (-1: none); sent[v]: bytes of the updates to version v
        self.synced = saved[SYNCED].numpy().copy() if saved else np.full(clients, -1, dtype=np.int64)
        self.sent = saved[SENT].numpy().tolist() if saved else [0.0]

    @property
    def version(self) -> int:
        return len(self.sent) - 1

    def broadcast(self, broadcast: Broadcast, clients: list[int]) -> Broadcast:
        """``broadcast`` as ``clients`` receive it: x^ for every tensor the server keeps one of, and each client's
        download (the updates since its last one, or the whole model), which it now has."""
        params = {name: self.public.get(name, t) for name, t in broadcast.params.items()}
        whole = tensor_bytes(params)
        since = np.cumsum(self.sent)
        downloads = {}
        for client in clients:
            last = int(self.synced[client])
            missed = since[self.version] - since[last] if last >= 0 else whole
            downloads[client] = int(min(whole, missed))
            self.synced[client] = self.version
        return dataclasses.replace(broadcast, params=params, downloads=downloads)

    def moved(self, current: Tensors, update: ClientUpdate) -> ClientUpdate:
        """The update moved onto the server's model: x + (x_i - x^) for each tensor the server keeps x^ of."""
        return moved(current, update, self.public)

    def advance(self, round: int, current: Tensors) -> None:
        """Encode x_{t+1} - x^_t after the server's step of ``round`` and build x^_{t+1}."""
        generator = torch.Generator().manual_seed(derive_seed(self.seed, Purpose.DOWNLINK, round))
        sent = 0
        for name, public in sorted(self.public.items()):
            change = (current[name] - public).reshape(-1).float()
            encoded = encode(self.codec, change, generator)
            sent += nbytes(encoded)
            self.public[name] = public + decode(self.codec, encoded, len(change)).reshape(public.shape).to(public.dtype)
        self.sent.append(float(sent))

    def saved(self) -> Tensors:
        """The public model, each client's last download and the updates' sizes, for a checkpoint."""
        out = {f"{PREFIX}model/{k}": t for k, t in self.public.items()}
        out[SYNCED] = torch.from_numpy(self.synced.copy())
        out[SENT] = torch.tensor(self.sent, dtype=torch.float64)
        return out
