"""Block files: written with plain writes, and read through without this process keeping the pages."""

import hashlib
from pathlib import Path

import numpy as np

from raysim.data import npy_file
from raysim.data.npy_file import read_rows, read_through, release_pages, write_npy
from raysim.data.shards import DatasetInfo, ShardStore
from raysim.testing.memory import resident_kb
from raysim.tracking.provenance import partition_digest

MB = 2**20
ROWS, ROW_BYTES = 256, 64 * 1024  # a 16 MB block


def block(tmp_path) -> tuple[Path, np.ndarray]:
    values = np.random.default_rng(0).integers(0, 255, (ROWS, ROW_BYTES), dtype=np.uint8)
    path = tmp_path / "block.npy"
    write_npy(path, np.uint8, values.shape, (values[i : i + 32] for i in range(0, ROWS, 32)))
    return path, values


def test_written_block_reads_back_and_release_drops_its_pages(tmp_path):
    path, values = block(tmp_path)
    mapped = np.load(path, mmap_mode="r")
    assert np.array_equal(mapped, values)
    assert resident_kb(path) * 1024 >= 0.9 * values.nbytes  # read once: every page counts here
    release_pages(mapped[10:20])  # through a view too
    assert resident_kb(path) == 0
    assert np.array_equal(mapped, values)  # still readable: the pages come back from the page cache
    release_pages(values)  # not a map: nothing happens


def test_read_through_holds_one_chunk_of_a_map(tmp_path):
    path, values = block(tmp_path)
    mapped = np.load(path, mmap_mode="r")
    chunks, most = [], 0
    for chunk in read_through(mapped, 32):
        chunks.append(np.array(chunk))
        most = max(most, resident_kb(path))
    assert np.array_equal(np.concatenate(chunks), values)
    assert most * 1024 <= 2 * 32 * ROW_BYTES  # a 2 MB chunk (and a page either side), not the 16 MB block
    assert resident_kb(path) * 1024 <= 32 * ROW_BYTES


def test_read_rows_copies_rows_of_a_mapped_file_without_mapping_its_pages(tmp_path, monkeypatch):
    path, values = block(tmp_path)
    mapped = np.load(path, mmap_mode="r")
    rows = np.concatenate([np.random.default_rng(1).permutation(ROWS)[:40], [7, 8, 9, 200, 3, 4, ROWS - 1]])
    monkeypatch.setattr(npy_file, "release_pages", lambda array: None)  # a read through the map would stay mapped
    for wanted in (rows, np.arange(ROWS), rows[:1], rows[:0], list(rows[:5])):  # scattered, runs, one, none, a list
        got = read_rows(mapped, wanted)
        assert got.shape == (len(wanted), ROW_BYTES) and np.array_equal(got, values[wanted])
        assert resident_kb(path) == 0  # plain reads: the pages went to the page cache, not this process
    assert np.array_equal(read_rows(mapped, [-1, 0]), values[[-1, 0]])  # not row numbers: read through the map
    assert resident_kb(path) > 0
    monkeypatch.undo()
    assert np.array_equal(read_rows(mapped[100:], rows[rows < 100]), values[100:][rows[rows < 100]])
    assert resident_kb(path) == 0  # a view of the map (its offset is the map's): read through it, then dropped
    assert np.array_equal(read_rows(values, rows), values[rows])  # not a map
    mapped[rows].sum()
    assert resident_kb(path) * 1024 >= len(np.unique(rows)) * ROW_BYTES  # through the map the same rows count here


def test_partition_digest_reads_a_mapped_block_without_keeping_it(tmp_path):
    path, values = block(tmp_path)
    labels, offsets = np.arange(ROWS, dtype=np.int64) % 3, np.array([0, 100, 200], dtype=np.int64)
    shards = ShardStore(
        DatasetInfo("t", 3, 1, (ROW_BYTES,)),
        np.load(path, mmap_mode="r"),
        labels,
        np.zeros(ROWS, np.int64),
        offsets,
        np.array([200, 230, ROWS], dtype=np.int64),
        None,
        (1,),
    )
    expected = hashlib.sha256(f"uint8{(ROW_BYTES,)}".encode())  # each row's BLAKE2b, then the rest as they are
    for row in values:
        expected.update(hashlib.blake2b(row.tobytes(), digest_size=16).digest())
    for array in (labels, np.zeros(ROWS, np.int64), offsets, shards.test_offsets):
        expected.update(f"{array.dtype}{array.shape}".encode())
        expected.update(np.ascontiguousarray(array))
    expected.update(b"[1]")
    assert partition_digest(shards) == expected.hexdigest()[:8]
    assert resident_kb(path) * 1024 <= 16 * MB // 4  # the hashed block's pages are dropped as it goes
