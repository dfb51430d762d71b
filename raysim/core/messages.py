"""What crosses between the server and a client, typed (Flower's ``RecordDict`` keeps arrays, metrics and configs
apart the same way): parameters and named extras are separate channels, so byte accounting and screening cover
every channel by default and no key is magic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from raysim.ops.aggregate import tensor_bytes

Tensors = dict[str, torch.Tensor]


def split_prefixed(tensors: Tensors, prefix: str) -> tuple[Tensors, Tensors]:
    """``tensors`` split into those whose name starts with ``prefix`` (names kept) and the rest."""
    chosen = {k: v for k, v in tensors.items() if k.startswith(prefix)}
    return chosen, {k: v for k, v in tensors.items() if k not in chosen}


def unprefixed(tensors: Tensors, prefix: str) -> Tensors:
    """The tensors whose name starts with ``prefix``, named without it."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class GlobalState:
    """The server's state: the communicated global tensors (``params``) and server-only tensors (momentum buffers,
    selection totals, cluster state, split learning's encoder ``encoder.*``). Tensors only, so checkpoints are exact.
    """

    params: Tensors
    server: Tensors = field(default_factory=dict)


@dataclass(frozen=True)
class Broadcast:
    """What goes down in a round: ``params`` and ``extras`` to every sampled client (one object, shared), and small
    per-client ``instructions`` (FedGCR's cluster id), which reach a client as ``ClientContext.instructions``.

    ``extras`` are named tensors a client reads but does not train (SGPT's selection shares q_g, FedGCR's centres).
    """

    params: Tensors
    extras: Tensors = field(default_factory=dict)
    instructions: dict[int, Tensors] = field(default_factory=dict)
    downloads: dict[int, int] | None = None  # per client, bytes of ``params`` as encoded under compression.downlink

    def bytes_down(self, sampled: list[int]) -> float:
        """The round's bytes down: params and extras to every sampled client, plus each one's instructions."""
        return float(sum(self.bytes_to(c) for c in sampled))

    def bytes_to(self, client: int) -> int:
        """What one client downloads: params (as encoded, under compression.downlink), extras and its instructions."""
        params = tensor_bytes(self.params) if self.downloads is None else self.downloads[client]
        return params + tensor_bytes(self.extras) + tensor_bytes(self.instructions.get(client, {}))


@dataclass
class ClientUpdate:
    """What comes back from a client: its trained ``params``, named ``extras`` (statistics a method defines, e.g.
    SGPT's selection counts N_g^i, FedGCR's representation h_tilde), its sample count, scalar ``metrics`` (loss,
    steps, timings) and its new persistent ``state`` (kept for the client's next participation, never aggregated).
    ``trained`` marks, per params tensor a client of a capacity tier trained only in part, the rows (first dimension)
    it trained as a boolean mask; only those rows are sent, counted and averaged. Absent: the whole tensor.
    """

    client_id: int
    num_samples: int
    params: Tensors
    extras: Tensors = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    state: Tensors | None = None
    trained: Tensors = field(default_factory=dict)
    sent: int | None = None  # bytes of ``params`` as encoded under compression.uplink (None: sent as they are)

    @property
    def bytes_up(self) -> int:
        if self.sent is not None:
            return self.sent + tensor_bytes(self.extras)
        whole = {name: t for name, t in self.params.items() if name not in self.trained}
        rows = sum(
            int(mask.sum()) * (t.numel() // max(len(mask), 1)) * t.element_size()
            for name, mask in self.trained.items()
            if (t := self.params.get(name)) is not None
        )
        return tensor_bytes(whole) + rows + tensor_bytes(self.extras)
