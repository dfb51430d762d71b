"""Compressed uplinks (``compression.*``): each client's update of the parameters encoded as the client would send
it, its bytes counted from the encoding (what the virtual clock charges and ``bytes_up`` reports), and decoded as
the server receives it, before screening and aggregation (:mod:`raysim.ops.compression`).

A client encodes, per tensor, what it trained minus what it received plus its error-feedback residual where
``compression.error_feedback`` is on, of the rows it sends: a capacity tier's trained rows, less those its method
leaves out (SGPT's keys and FGPT's group prompts of groups it did not choose, which the server weighs at zero). The
residual, one number per number of the tensor, keeps what was not sent or not decoded; it lives with the client's
state (:class:`~raysim.engine.client_states.ClientStates`, under ``RESIDUAL``), so a population of any size keeps
its bytes only, and a checkpoint keeps it. Extras (SGPT's counts, FedGCR's representation) go uncompressed. The
encoding's random draws come from (run seed, round, client), so every backend and a resumed run draw the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from raysim.base.seeding import Purpose, derive_seed
from raysim.core.messages import Broadcast, ClientUpdate, Tensors
from raysim.core.protocol import Method, SendsExtras
from raysim.engine.screening import bad_mask, bad_tensor
from raysim.ops.aggregate import tensor_bytes
from raysim.ops.codecs import parse
from raysim.ops.compression import decode, encode, nbytes

RESIDUAL = "uplink.residual/"  # a client state's names that hold error feedback's residual, one per tensor


def own_state(state: Tensors | None) -> Tensors | None:
    """``state`` without the residual: what the method kept (None where it kept nothing)."""
    if state is None:
        return None
    own = {name: t for name, t in state.items() if not name.startswith(RESIDUAL)}
    return own or None


def residual_of(state: Tensors | None) -> Tensors:
    """The residual in ``state``, by tensor name."""
    return {name[len(RESIDUAL) :]: t for name, t in (state or {}).items() if name.startswith(RESIDUAL)}


class OwnStates(Mapping):
    """The method's part of every client's state (a view: nothing is copied until a client's state is read)."""

    def __init__(self, states: Mapping[int, Tensors]):
        self.states = states

    def __getitem__(self, client: int) -> Tensors:
        own = own_state(self.states[client])
        if own is None:
            raise KeyError(client)
        return own

    def __iter__(self) -> Iterator[int]:
        return (client for client in self.states if own_state(self.states[client]) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def malformed(update: ClientUpdate, received: Tensors) -> bool:
    """Whether ``update`` holds what screening rejects and an encoding cannot take (screening's own checks): a value
    that is not finite, a tensor of another shape than the one the client received, or a ``trained`` mask that is
    not one boolean per row."""
    return any(
        bad_tensor(name, tensor, received[name].shape if name in received else None)
        or (name in update.trained and bad_mask(update.trained[name], tensor.shape))
        for name, tensor in update.params.items()
    )


def rows_sent(trained: torch.Tensor | None, left_out: torch.Tensor | None) -> torch.Tensor | None:
    """The rows of a tensor an update sends: those its capacity tier trained, less those the method leaves out
    (:meth:`~raysim.core.protocol.SendsExtras.rows_left_out`); None: every row."""
    if left_out is None:
        return trained
    return ~left_out if trained is None else trained & ~left_out


def as_rows(residual: torch.Tensor, owed: torch.Tensor, trained: torch.Tensor | None) -> torch.Tensor:
    """``residual`` in ``owed``'s rows; a checkpoint of raysim before 338ce83 kept a capacity tier's trained rows'
    residual only, which goes back to those rows."""
    if residual.numel() == owed.numel() or trained is None:
        return residual.reshape(owed.shape)
    full = torch.zeros_like(owed)
    full[trained] = residual.reshape(-1, owed.shape[1])
    return full


class Uplink:
    """The round's uplink under ``compression.*``: :meth:`send` turns a trained update into what the server
    receives, and remembers each sender's new residual until :meth:`state_to_keep` stores it."""

    def __init__(self, config, method: Method):
        self.codec = parse(config.compression.uplink)
        self.feedback = config.compression.error_feedback
        self.seed = config.federation.seed
        self.method = method
        self.residuals: dict[int, Tensors] = {}  # the round's senders' new residuals

    def send(self, round: int, broadcast: Broadcast, update: ClientUpdate, state: Tensors | None) -> ClientUpdate:
        """``update`` as the server decodes it, its params' encoded bytes in ``update.sent``; ``state`` is what the
        client kept (its residual in it). An update screening rejects (:func:`malformed`) goes as it is, for
        screening to name (an encoding would drop or spread a NaN and keep it in the residual, or fail on a shape),
        counted as uncompressed, and leaves no residual."""
        received = {**broadcast.params, **broadcast.instructions.get(update.client_id, {})}
        if malformed(update, received):  # its bytes: a tier's trained rows, as uncompressed; whole where a mask is bad
            masks_bad = any(
                bad_mask(m, t.shape) for n, t in update.params.items() if (m := update.trained.get(n)) is not None
            )
            update.sent = tensor_bytes(update.params) if masks_bad else None
            return update
        residual = residual_of(state) if self.feedback else {}
        left_out = self.method.rows_left_out(update) if isinstance(self.method, SendsExtras) else {}
        generator = torch.Generator().manual_seed(derive_seed(self.seed, Purpose.COMPRESSION, round, update.client_id))
        decoded, kept, sent = {}, {}, 0
        for name, tensor in sorted(update.params.items()):
            if name not in received:  # nothing the client received to encode against: sent as it is
                decoded[name], sent = tensor, sent + tensor_bytes({name: tensor})
                continue
            base = received[name].to(tensor.dtype)
            rows = rows_sent(update.trained.get(name), left_out.get(name))
            # the change and the residual, one row per row of the tensor (a scalar: one row)
            owed = (tensor - base).reshape(max(len(base), 1) if base.dim() else 1, -1).float()
            if name in residual:
                owed = owed + as_rows(residual[name], owed, update.trained.get(name))
            chosen = owed if rows is None else owed[rows]
            values = torch.zeros_like(chosen)
            if chosen.numel():
                vector = chosen.reshape(-1)
                encoded = encode(self.codec, vector, generator)
                values = decode(self.codec, encoded, len(vector)).reshape(chosen.shape)
                sent += nbytes(encoded)
            if rows is None:
                arrived = values
            else:  # the rows it did not send: what it received
                arrived = torch.zeros_like(owed)
                arrived[rows] = values
            decoded[name] = base + arrived.reshape(base.shape).to(tensor.dtype)
            if self.feedback:
                kept[RESIDUAL + name] = (owed - arrived).reshape(-1)
        update.params, update.sent = decoded, sent
        if self.feedback:
            self.residuals[update.client_id] = kept
        return update

    def state_to_keep(self, client: int, method_state: Tensors | None, previous: Tensors | None) -> Tensors | None:
        """The client's state after the round: the method's (new, else its previous) and its new residual."""
        own = method_state if method_state is not None else own_state(previous)
        residual = self.residuals.pop(client, None)
        if residual is None:
            return method_state
        return {**(own or {}), **residual}
