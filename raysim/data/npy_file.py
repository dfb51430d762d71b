"""``.npy`` files written a chunk at a time with plain writes, then mapped read-only.

Pages written through a map count in the writer's memory for as long as it maps them; pages written with ``write``
go to the page cache only. The data phase writes the parquet decode cache and the shard block this way.
"""

from __future__ import annotations

from collections.abc import Iterable
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
