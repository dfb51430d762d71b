"""The clients' persistent states, kept where the global state lives: compact at any population.

A client's state (Ditto's personal model, FedGCR's h_prev and z_prev, Fed-RoD's head) is created when it first
takes part. The tensors of each name live in one flat arena per name, not one object per client, so a population
of 100,000 clients costs its bytes, not 100,000 tensor objects; a state that keeps its size is overwritten in place.
The clients changed since the last checkpoint are tracked, so a checkpoint writes only those.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

Tensors = dict[str, torch.Tensor]


class _Arena:
    """Tensors of one name (one dtype), each a slice of a flat buffer that grows by doubling."""

    def __init__(self, dtype: torch.dtype):
        self.buffer = torch.empty(1024, dtype=dtype)
        self.used = 0
        self.slots: dict[int, tuple[int, tuple[int, ...]]] = {}  # client -> (offset, shape)

    def put(self, client: int, tensor: torch.Tensor) -> None:
        if tensor.dtype != self.buffer.dtype:
            raise ValueError(f"client {client}'s state is {tensor.dtype} where other clients' is {self.buffer.dtype}")
        flat = tensor.detach().reshape(-1)
        old = self.slots.get(client)
        if old is not None and _numel(old[1]) == flat.numel():
            offset = old[0]
        else:
            self._reserve(flat.numel())
            offset, self.used = self.used, self.used + flat.numel()
        self.buffer[offset : offset + flat.numel()] = flat
        self.slots[client] = (offset, tuple(tensor.shape))

    def get(self, client: int) -> torch.Tensor:
        offset, shape = self.slots[client]
        return self.buffer[offset : offset + _numel(shape)].view(shape).clone()

    def _reserve(self, extra: int) -> None:
        if self.used + extra <= len(self.buffer):
            return
        live = sum(_numel(shape) for _, shape in self.slots.values())
        if live + extra <= len(self.buffer) // 2:  # mostly stale slices of resized states: compact in place
            self._compact()
            return
        grown = torch.empty(max(2 * len(self.buffer), self.used + extra), dtype=self.buffer.dtype)
        grown[: self.used] = self.buffer[: self.used]
        self.buffer = grown

    def _compact(self) -> None:
        packed, used = torch.empty_like(self.buffer), 0
        for client, (offset, shape) in self.slots.items():
            n = _numel(shape)
            packed[used : used + n] = self.buffer[offset : offset + n]
            self.slots[client], used = (used, shape), used + n
        self.buffer, self.used = packed, used


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


class ClientStates(Mapping):
    """client id -> its state (copies of the stored tensors), for the clients that have one."""

    def __init__(self, states: Mapping[int, Tensors] | None = None):
        self.clear()
        self.cleared = False
        for client, state in (states or {}).items():
            self.put(client, state)
        self.dirty = set()

    def __getitem__(self, client: int) -> Tensors:
        names = self._names[client]
        return {name: self._arenas[name].get(client) for name in names}

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def put(self, client: int, state: Tensors) -> None:
        for name, tensor in state.items():
            if name not in self._arenas:
                self._arenas[name] = _Arena(tensor.dtype)
            self._arenas[name].put(client, tensor)
        self._names[client] = self._interned.setdefault(tuple(state), tuple(state))
        self.dirty.add(client)

    def clear(self) -> None:
        """Every client starts over (FedV's head/tail averaging replaces what each kept)."""
        self._arenas: dict[str, _Arena] = {}
        self._names: dict[int, tuple[str, ...]] = {}
        self._interned: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.dirty: set[int] = set()
        self.cleared = True

    def take_changes(self) -> tuple[bool, dict[int, Tensors]]:
        """(whether all were cleared, the states changed) since the last call."""
        changes = (self.cleared, {c: self[c] for c in sorted(self.dirty)})
        self.dirty, self.cleared = set(), False
        return changes

    def nbytes(self) -> int:
        """Bytes the arenas hold (allocated, live or stale)."""
        return sum(a.buffer.numel() * a.buffer.element_size() for a in self._arenas.values())
