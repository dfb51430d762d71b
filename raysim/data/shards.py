"""Client shards: the whole federated dataset as one block sorted by client, plus an offsets table.

The image block lives in memory (put in the Ray object store once; every worker reads a client's rows as a
zero-copy view) or, for a large population on one machine, in a file that every process maps read-only
(:func:`build_shards` with ``folder``): a worker then touches only its cohort's rows, the page cache is shared, and
a block larger than memory works. When the images already are such a file (the parquet decode cache), the block is
that file itself, read by row numbers, and no second copy in client order is written: a data set larger than
memory costs its decoded size on disk once, not twice. Either way 10,000 clients cost one block and two offset
arrays rather than 10,000 objects (``bench/shards.py`` measures both layouts). Raw data never leaves a worker: only
what a method returns (parameters and the statistics it defines) crosses to the coordinator.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raysim.base.owned_files import abandoned, owner_tag
from raysim.data.npy_file import read_rows, read_through, whole_file, write_npy
from raysim.data.partition import Partition
from raysim.data.row_digests import ROWS_AT_A_TIME, partition_digest, row_digests

GATHER_ROWS = 16_384  # rows copied at a time when a block is written to disk (bounds the memory it takes)


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

    def slice(self, start: int, stop: int) -> ClientData:
        """Rows ``start:stop`` (views)."""
        return ClientData(
            self.images[start:stop],
            self.labels[start:stop],
            self.domains[start:stop],
            {name: values[start:stop] for name, values in self.features.items()},
        )

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
    # the domains from most clients to fewest under a domain imbalance factor (FedGCR's authors' order, which makes
    # the hardest domain the rarest); None: by domain id
    imbalance_order: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ShardStore:
    """All clients' rows in one block: train rows of client 0, 1, ... then test rows of client 0, 1, ...

    Attributes:
        images, labels, domains: the block.
        train_offsets, test_offsets: [M + 1] row offsets; client i's train rows are
            ``train_offsets[i]:train_offsets[i + 1]``.
        client_domain: [M] the client's type (domain) when the partition defines one, else None.
        unseen: ids of held-out clients that never train (evaluated with the global model).
        features: per-row arrays a method computed once per run
            (:meth:`raysim.core.protocol.CachesRowFeatures.row_features`).
        image_rows: None when ``images`` holds the block's rows in order; else the row of ``images`` that holds each
            row's image, ``images`` being a read-only map of a whole ``.npy`` file (the decode cache), which a
            client's rows are read from (:func:`~raysim.data.npy_file.read_rows`) rather than viewed.
        digest: the partition's digest (:meth:`content_digest`) where it was computed as the block was built, from
            row digests the source kept; None: computed from the images when asked.
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
    image_rows: np.ndarray | None = None
    digest: str | None = None

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

    def __reduce_ex__(self, protocol):
        """A store whose block is a file travels as the file's path (each process maps it); else as its arrays
        (out of band, so the object store hands workers zero-copy views)."""
        if isinstance(self.images, np.memmap) and self.images.filename:
            fields = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "images"}
            return _mapped_store, (self.images.filename, fields)
        return super().__reduce_ex__(protocol)

    def image_chunks(self, rows: int) -> Iterator[np.ndarray]:
        """Every row's image in the block's order, ``rows`` rows at a time, without this process keeping the pages
        of a mapped file (:func:`~raysim.data.npy_file.read_through`, :func:`~raysim.data.npy_file.read_rows`)."""
        if self.image_rows is None:
            yield from read_through(self.images, rows)
            return
        for start in range(0, len(self.image_rows), rows):
            yield read_rows(self.images, self.image_rows[start : start + rows])

    def content_digest(self) -> str:
        """What the clients hold, as one SHA-256 (hex): :func:`raysim.data.row_digests.partition_digest` of every
        row's image digest, label and domain in the block's order, the offsets and the held-out clients."""
        return self.digest or _digest(self, (row_digests(chunk) for chunk in self.image_chunks(ROWS_AT_A_TIME)))

    def _rows(self, lo: int, hi: int) -> ClientData:
        return ClientData(
            self.images[lo:hi] if self.image_rows is None else read_rows(self.images, self.image_rows[lo:hi]),
            self.labels[lo:hi],
            self.domains[lo:hi],
            {name: values[lo:hi] for name, values in self.features.items()},
        )


def build_shards(
    info: DatasetInfo,
    arrays: dict[str, np.ndarray],
    part: Partition,
    unseen: tuple[int, ...],
    folder: Path | None = None,
) -> ShardStore:
    """Sort the rows by (split, client) into one block; rows that no client holds are dropped.

    Args:
        arrays: ``image``, ``label``, ``domain`` and ``is_test`` per row (train and test together); ``image`` may be
            a memory map; with ``row``, each row's image is ``image[row]`` (a subset of the block's rows); with
            ``image_digest``, the digest of each row of ``image`` (:func:`~raysim.data.row_digests.row_digests`),
            from which the store's ``digest`` is computed now.
        part: the partition, with a client id per train row and per test row.
        folder: keep the image block in a file, not in memory: ``image`` itself when it maps a whole ``.npy`` file
            (the decode cache; the store then reads each row from where it lies, ``image_rows``), else a new file
            written here and mapped (removed when no store of this process maps it any more).
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
    in_block = arrays["row"][order_all] if "row" in arrays else order_all
    in_place = folder is not None and whole_file(arrays["image"])
    if folder is None:
        images = np.ascontiguousarray(arrays["image"][in_block])
    else:
        images = arrays["image"] if in_place else _gather(arrays["image"], in_block, folder)
    store = ShardStore(
        info=info,
        images=images,
        labels=arrays["label"][order_all].astype(np.int64),
        domains=arrays["domain"][order_all].astype(np.int64),
        train_offsets=offsets[0].astype(np.int64),
        test_offsets=(offsets[1] + len(order[0])).astype(np.int64),
        client_domain=part.client_domain,
        unseen=unseen,
        image_rows=in_block.astype(np.int64) if in_place else None,
    )
    if folder is not None and not in_place:  # the file goes with the last store here that maps it (replace() shares it)
        weakref.finalize(images, os.unlink, images.filename)
    if "image_digest" in arrays:
        store = dataclasses.replace(store, digest=_digest(store, [arrays["image_digest"][in_block]]))
    return store


def _digest(store: ShardStore, image_digests: Iterable[np.ndarray]) -> str:
    arrays = (store.labels, store.domains, store.train_offsets, store.test_offsets)
    return partition_digest(image_digests, (store.images.dtype, store.images.shape[1:]), arrays, store.unseen)


def _gather(images: np.ndarray, order: np.ndarray, folder: Path) -> np.memmap:
    """``images[order]`` written to a new ``.npy`` file in ``folder`` a chunk at a time (:func:`write_npy`), then
    mapped read-only. When ``images`` is a map (the decode cache), its rows are read without its pages counting in
    this process (:func:`read_rows`): the gather reads all over it, and through the map a chunk of 16,384 rows mapped
    all of it (the whole decode cache in the set-up's peak: 598 of 1,410 MB at 10,000 x 20, a cold cache)."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_orphans(folder)
    chunks = (read_rows(images, order[start : start + GATHER_ROWS]) for start in range(0, len(order), GATHER_ROWS))
    path = folder / f"shards-{owner_tag()}.npy"
    try:
        return write_npy(path, images.dtype, (len(order), *images.shape[1:]), chunks)
    except BaseException:  # a full disk, Ctrl-C: no half-written block stays behind
        path.unlink(missing_ok=True)
        raise


def remove_orphans(folder: Path) -> None:
    """Remove the blocks in ``folder`` whose process is gone: one killed before it could (SIGKILL, the OOM killer)
    leaves its block, as large as the data set. A block's name holds the process that maps it for its run and that
    process's machine (a shared home folder holds other machines' blocks, whose processes are not seen here)."""
    for path in abandoned(folder, "shards-*.npy", lambda name: name[len("shards-") : -len(".npy")]):
        path.unlink(missing_ok=True)


def _mapped_store(path: str, fields: dict) -> ShardStore:
    return ShardStore(images=np.load(path, mmap_mode="r"), **fields)
