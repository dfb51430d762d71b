"""``.npy`` files written a chunk at a time with plain writes, then mapped read-only; and maps read without keeping
their pages.

Pages written through a map count in the writer's memory for as long as it maps them; pages written with ``write``
go to the page cache only. The data phase writes the parquet decode cache and the shard block this way. Pages read
through a map count in the reader's memory too, until it unmaps them or drops them (:func:`release_pages`): a
process that reads a whole block once (to hash or embed it) drops them a chunk at a time, and rows scattered over a
file are read with plain reads (:func:`read_rows`). Where the kernel keeps a file's page cache in large folios (ext4
on Linux 6.x), a read through a map maps a whole folio, up to 2 MB, not a 4 kB page.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np


def write_npy(path: Path, dtype, shape: tuple[int, ...], chunks: Iterable[np.ndarray]) -> np.memmap:
    """Write ``chunks`` (rows in order, ``shape[0]`` in all) as one ``.npy`` array of ``shape``; return its map."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(file, header)
        for chunk in chunks:
            file.write(np.ascontiguousarray(chunk, dtype=dtype).data)
    return np.load(path, mmap_mode="r")


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of the file map under ``array`` from this process; they stay in the page cache, so reading
    them again costs a minor fault, not a disk read. Arrays not backed by a map are left alone."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, mmap.mmap):
        base.madvise(mmap.MADV_DONTNEED)


def read_through(array: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """``array`` ``rows`` rows at a time (views); when it is a file map, the pages read so far are dropped from this
    process before each next chunk, so a pass over the whole block holds one chunk's pages at a time."""
    for start in range(0, len(array), rows):
        yield array[start : start + rows]
        release_pages(array)


def read_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` (a copy). When ``array`` maps a whole ``.npy`` file (``np.load(..., mmap_mode="r")``), the rows
    are read from the file with plain reads (one per run of consecutive rows), so none of its pages count in this
    process: read through the map, 512 rows scattered over a 614 MB decode cache mapped 462 MB of it (ext4's large
    folios, Linux 6.18). Other maps are read through and their pages dropped after (:func:`release_pages`)."""
    if not (isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap)):  # a view's offset is its map's
        copy = array[rows]
        release_pages(array)
        return copy
    out = np.empty((len(rows), *array.shape[1:]), array.dtype)
    row_bytes = array.itemsize * int(np.prod(array.shape[1:]))
    flat = out.reshape(-1).view(np.uint8).reshape(len(rows), row_bytes)
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
    with open(array.filename, "rb", buffering=0) as file:
        for start, stop in zip(starts, [*starts[1:], len(rows)]):
            file.seek(array.offset + int(rows[start]) * row_bytes)
            if file.readinto(flat[start:stop]) != (stop - start) * row_bytes:
                raise OSError(f"{array.filename} ended before row {rows[start:stop].max()} (was it truncated?)")
    return out
