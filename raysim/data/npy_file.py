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
    them again costs a minor fault, not a disk read. Arrays not backed by a map are left alone, and so is every
    map where the system has no such advice (Windows)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        base.madvise(mmap.MADV_DONTNEED)


def read_through(array: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """``array`` ``rows`` rows at a time (views); when it is a file map, the pages read so far are dropped from this
    process before each next chunk, so a pass over the whole block holds one chunk's pages at a time."""
    for start in range(0, len(array), rows):
        yield array[start : start + rows]
        release_pages(array)


def read_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` (a copy). When ``array`` maps a whole ``.npy`` file read-only (``np.load(..., mmap_mode="r")``)
    and ``rows`` are row numbers within it, the rows are read from the file with plain reads (one per run of
    consecutive rows), so none of its pages count in this process: read through the map, 512 rows scattered over a
    614 MB decode cache mapped 462 MB of it (ext4's large folios, Linux 6.18). Otherwise the rows are read through
    the map and its pages dropped after (:func:`release_pages`)."""
    rows = np.asarray(rows)
    if whole_file(array) and rows.dtype.kind in "iu" and (not len(rows) or 0 <= rows.min() <= rows.max() < len(array)):
        try:
            with open(array.filename, "rb", buffering=0) as file:
                return _read_runs(file, array, rows)
        except FileNotFoundError:  # removed since it was mapped (a decode cache another run pruned): the map reads it
            pass
    copy = array[rows]
    release_pages(array)
    return copy


def whole_file(array: np.ndarray) -> bool:
    """Whether ``array`` is a read-only C-order map of a whole ``.npy`` file (a view's ``offset`` is its map's)."""
    return (
        isinstance(array, np.memmap)
        and isinstance(array.base, mmap.mmap)
        and array.mode == "r"
        and array.flags.c_contiguous
    )


def _read_runs(file, array: np.memmap, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` read from ``file``, the file ``array`` maps, one run of consecutive rows at a time."""
    out = np.empty((len(rows), *array.shape[1:]), array.dtype)
    row_bytes = array.itemsize * int(np.prod(array.shape[1:]))
    flat = memoryview(out.reshape(-1).view(np.uint8))
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
    for start, stop in zip(starts, [*starts[1:], len(rows)]):
        file.seek(array.offset + int(rows[start]) * row_bytes)
        wanted, done = flat[start * row_bytes : stop * row_bytes], 0
        while done < len(wanted):  # one read returns at most about 2 GB
            got = file.readinto(wanted[done:])
            if not got:
                raise OSError(f"{array.filename} ended before its row {int(rows[stop - 1])} (was it truncated?)")
            done += got
    return out
