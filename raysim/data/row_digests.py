"""What identifies the clients' data: a digest of each image row, and from those, of the whole partition.

The partition's digest (the MLflow dataset input's, :func:`raysim.tracking.provenance.partition_digest`) covers every
row's image, label and domain in the clients' order and who holds it. Hashed as one stream, the images would have to
be read in that order: for a block read in place from a decode cache larger than memory (:mod:`raysim.data.shards`),
one random read per row. Hashing each row on its own (BLAKE2b, 16 bytes) and then the row digests in the clients'
order gives a digest that does not depend on where the rows lie, and the parquet source keeps its rows' digests
beside the decode cache (:func:`kept_row_digests`), so a later run hashes 16 bytes a row, not the images.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from raysim.data.npy_file import read_through

DIGEST_BYTES = 16  # BLAKE2b digest size per row
ROWS_AT_A_TIME = 16_384


def row_digests(images: np.ndarray) -> np.ndarray:
    """The BLAKE2b digest of each row's bytes (C order), ``[len(images), DIGEST_BYTES]`` uint8."""
    flat = np.ascontiguousarray(images).reshape(len(images), int(np.prod(images.shape[1:])))
    width = flat.shape[1] * flat.itemsize
    data = memoryview(flat.reshape(-1).view(np.uint8))
    joined = b"".join(
        hashlib.blake2b(data[i * width : (i + 1) * width], digest_size=DIGEST_BYTES).digest() for i in range(len(flat))
    )
    return np.frombuffer(joined, np.uint8).reshape(len(flat), DIGEST_BYTES)


def digests_path(copy: Path) -> Path:
    """Where the row digests of the decoded copy ``copy`` (``parquet-<key>.npy``) are kept: ``parquet-<key>.digests``
    (an ``.npy`` array; named so that no ``parquet-*.npy`` pattern takes it for a decoded copy)."""
    return copy.with_suffix(".digests")


def save_row_digests(copy: Path, digests: Iterable[np.ndarray]) -> np.ndarray:
    """Keep ``digests`` (chunks, rows in order) beside ``copy`` (written under a temporary name, then renamed), and
    return them as one array."""
    joined = np.concatenate(list(digests))
    partial = copy.with_name(f".{copy.stem}.digests.{uuid.uuid4().hex}")
    try:
        with open(partial, "wb") as file:
            np.save(file, joined)
        os.replace(partial, digests_path(copy))
    finally:
        partial.unlink(missing_ok=True)
    return joined


def kept_row_digests(copy: Path, images: np.ndarray) -> np.ndarray:
    """The row digests kept beside the decoded copy ``copy`` (whose map is ``images``); computed in one pass over it
    and kept when missing or of another length."""
    path = digests_path(copy)
    if path.exists():
        digests = np.load(path)
        if digests.shape == (len(images), DIGEST_BYTES):
            return digests
    return save_row_digests(copy, (row_digests(chunk) for chunk in read_through(images, ROWS_AT_A_TIME)))


def partition_digest(
    digests: Iterable[np.ndarray],
    image: tuple[np.dtype, tuple[int, ...]],
    arrays: Iterable[np.ndarray],
    unseen: Iterable[int],
) -> str:
    """The SHA-256 (hex) of the rows' ``digests`` (chunks, in the clients' order) under the ``image`` dtype and shape
    of a row, then each of ``arrays`` (labels, domains, offsets) with its dtype and shape, then the held-out
    clients."""
    dtype, shape = image
    digest = hashlib.sha256(f"{np.dtype(dtype)}{tuple(shape)}".encode())
    for chunk in digests:
        digest.update(np.ascontiguousarray(chunk))
    for array in arrays:
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array))
    digest.update(repr(sorted(int(c) for c in unseen)).encode())
    return digest.hexdigest()
