"""Client shards: the whole federated dataset as one block sorted by client, plus an offsets table.

The block is put in the Ray object store once; every worker holds a reference and reads a client's rows
as a zero-copy numpy view (``images[lo:hi]``). 10,000 clients cost one object and two offset arrays
rather than 10,000 objects (``bench/shards.py`` measures both layouts). Raw data never leaves a worker:
only what a method returns (parameters and the statistics it defines) crosses to the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raysim.data.partition import Partition


@dataclass(frozen=True)
class ClientData:
    """One client's train or test rows (read-only views into the shared block).

    ``features`` holds what a method caches per row once per run (e.g. SGPT's selection query), row-aligned.
    """

    images: np.ndarray
    labels: np.ndarray
    domains: np.ndarray
    features: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @staticmethod
    def concat(parts: list[ClientData]) -> ClientData:
        """The rows of ``parts`` one after another (e.g. several clients evaluated as one batch)."""
        names = parts[0].features.keys() if parts else ()
        return ClientData(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("images", "labels", "domains")),
            {n: np.concatenate([p.features[n] for p in parts]) for n in names},
        )


@dataclass(frozen=True)
class DatasetInfo:
    """What a method and the metrics need to know about the data, without the data."""

    name: str
    num_classes: int
    num_domains: int
    image_shape: tuple[int, ...]
    class_names: tuple[str, ...] = ()
    domain_names: tuple[str, ...] = ()
    coarse_of_class: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ShardStore:
    """All clients' rows in one block: train rows of client 0, 1, ... then test rows of client 0, 1, ...

    Attributes:
        images, labels, domains: the block.
        train_offsets, test_offsets: [M + 1] row offsets; client i's train rows are
            ``train_offsets[i]:train_offsets[i + 1]``.
        client_domain: [M] the client's type (domain) when the partition defines one, else None.
        unseen: ids of held-out clients that never train (evaluated with the global model).
        features: per-row arrays a method computed once per run (:meth:`raysim.method.Method.row_features`).
    """

    info: DatasetInfo
    images: np.ndarray
    labels: np.ndarray
    domains: np.ndarray
    train_offsets: np.ndarray
    test_offsets: np.ndarray
    client_domain: np.ndarray | None
    unseen: tuple[int, ...]
    features: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.train_offsets) - 1

    def train(self, client: int) -> ClientData:
        return self._rows(self.train_offsets[client], self.train_offsets[client + 1])

    def test(self, client: int) -> ClientData:
        return self._rows(self.test_offsets[client], self.test_offsets[client + 1])

    def train_sizes(self) -> np.ndarray:
        return np.diff(self.train_offsets)

    def test_sizes(self) -> np.ndarray:
        return np.diff(self.test_offsets)

    def seen_clients(self) -> list[int]:
        unseen = set(self.unseen)
        return [c for c in range(self.num_clients) if c not in unseen]

    def _rows(self, lo: int, hi: int) -> ClientData:
        return ClientData(
            self.images[lo:hi],
            self.labels[lo:hi],
            self.domains[lo:hi],
            {name: values[lo:hi] for name, values in self.features.items()},
        )


def build_shards(
    info: DatasetInfo, arrays: dict[str, np.ndarray], part: Partition, unseen: tuple[int, ...]
) -> ShardStore:
    """Sort the rows by (split, client) into one block; rows that no client holds are dropped.

    Args:
        arrays: ``image``, ``label``, ``domain`` and ``is_test`` per row (train and test together).
        part: the partition, with a client id per train row and per test row.
    """
    is_test = arrays["is_test"].astype(bool)
    train_rows, test_rows = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    num_clients = part.shares.shape[-1]
    order, offsets = [], []
    for rows, owner in ((train_rows, part.train_client), (test_rows, part.test_client)):
        kept = owner >= 0
        rows, owner = rows[kept], owner[kept]
        by_client = np.argsort(owner, kind="stable")
        order.append(rows[by_client])
        offsets.append(np.searchsorted(owner[by_client], np.arange(num_clients + 1)))
    order_all = np.concatenate(order)
    train_offsets = offsets[0].astype(np.int64)
    test_offsets = (offsets[1] + len(order[0])).astype(np.int64)
    return ShardStore(
        info=info,
        images=np.ascontiguousarray(arrays["image"][order_all]),
        labels=arrays["label"][order_all].astype(np.int64),
        domains=arrays["domain"][order_all].astype(np.int64),
        train_offsets=train_offsets,
        test_offsets=test_offsets,
        client_domain=part.client_domain,
        unseen=unseen,
    )
