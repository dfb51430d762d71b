import gc
import pickle
from pathlib import Path

import numpy as np
import pytest

from raysim.data.npy_file import write_npy
from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import DatasetInfo, build_shards
from raysim.testing.memory import resident_kb
from raysim.tracking.provenance import partition_digest


def row_images(n: int) -> np.ndarray:
    """2x2 images that carry their row r: r // 256 in the first pixel, r % 256 in the second."""
    images = np.zeros((n, 2, 2), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 1] = np.arange(n) // 256, np.arange(n) % 256
    return images


def row_ids(images: np.ndarray) -> list[int]:
    return (images[:, 0, 0].astype(int) * 256 + images[:, 0, 1]).tolist()


def dirichlet_shards(folder=None, images=None):
    """300 rows over 7 clients (client 3 unseen), every fourth a test row; ``images``: the image block (default the
    rows' ids, in memory). Returns the store, the arrays it came from, and the partition."""
    rng = np.random.default_rng(0)
    n = 300
    labels, domains = rng.integers(0, 5, n), np.zeros(n, dtype=np.int64)
    is_test = np.arange(n) % 4 == 0
    arrays = {
        "image": row_images(n) if images is None else images,
        "label": labels,
        "domain": domains,
        "is_test": is_test,
    }
    part = partition(
        "dirichlet",
        train_labels=labels[~is_test],
        train_domains=domains[~is_test],
        test_labels=labels[is_test],
        test_domains=domains[is_test],
        num_classes=5,
        num_domains=1,
        num_clients=7,
        params=PartitionParams(alpha=1.0),
        seed=1,
    )
    return build_shards(DatasetInfo("t", 5, 1, (2, 2)), arrays, part, unseen=(3,), folder=folder), arrays, part


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "mapped-file"])
def test_shards_are_contiguous_per_client_and_match_the_partition(on_disk, tmp_path):
    folder = tmp_path / "shards" if on_disk else None
    shards, arrays, part = dirichlet_shards(folder)
    n, labels, is_test = len(arrays["label"]), arrays["label"], arrays["is_test"]
    train_rows, test_rows = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    seen_rows = []
    for client in range(7):
        train, test = shards.train(client), shards.test(client)
        expected_train = train_rows[part.train_client == client]
        expected_test = test_rows[part.test_client == client]
        assert sorted(row_ids(train.images)) == expected_train.tolist()
        assert sorted(row_ids(test.images)) == expected_test.tolist()
        assert sorted(train.labels.tolist()) == sorted(labels[expected_train].tolist())
        seen_rows += row_ids(train.images) + row_ids(test.images)
    assert sorted(seen_rows) == list(range(n))  # every row in exactly one client's train or test block
    assert shards.train_sizes().sum() + shards.test_sizes().sum() == n
    assert shards.seen_clients() == [0, 1, 2, 4, 5, 6]
    assert shards.images.flags.c_contiguous
    if on_disk:  # a read-only map of one file, removed with the last store that maps it
        assert isinstance(shards.images, np.memmap) and not shards.images.flags.writeable
        assert shards.images.dtype == np.uint8 and shards.images.shape == (n, 2, 2)
        (file,) = folder.iterdir()
        del shards, train, test
        gc.collect()
        assert not file.exists()


def test_a_block_that_already_is_a_mapped_file_is_read_in_place(tmp_path):
    """Images that are a whole .npy map (the decode cache) are not copied into client order: the store reads each
    client's rows from where they lie, keeps none of the file's pages, travels as the file's path, and holds the
    same rows, in the same order and with the same digest, as the block gathered into memory."""
    n = 300
    cache = write_npy(tmp_path / "decoded.npy", np.uint8, (n, 2, 2), [row_images(n)[:100], row_images(n)[100:]])
    folder = tmp_path / "shards"
    in_place, _, _ = dirichlet_shards(folder, cache)
    gathered, _, _ = dirichlet_shards()
    assert not folder.exists()  # no second copy written
    assert in_place.images.filename == cache.filename and in_place.image_rows is not None
    travelled = pickle.loads(pickle.dumps(in_place))
    for store in (in_place, travelled):
        for client in range(7):
            pairs = ((store.train(client), gathered.train(client)), (store.test(client), gathered.test(client)))
            for mine, theirs in pairs:
                assert row_ids(mine.images) == row_ids(theirs.images)
                assert mine.labels.tolist() == theirs.labels.tolist()
        assert resident_kb(cache.filename) == 0
    assert np.array_equal(np.concatenate(list(in_place.image_chunks(64))), gathered.images)
    assert partition_digest(in_place) == partition_digest(gathered)


def test_a_block_left_by_a_killed_process_goes_and_a_failed_write_leaves_none(owners, tmp_path, monkeypatch):
    """Blocks are named by their process and machine: the next store built here removes one whose process is gone
    (a SIGKILLed run could not), and leaves a live process's and another machine's; a write that fails midway
    removes its own partial block."""

    from raysim.data import shards as shards_module

    folder = tmp_path / "shards"
    folder.mkdir()
    orphan = folder / f"shards-{owners.gone}.npy"
    live = folder / f"shards-{owners.running}.npy"
    elsewhere = folder / f"shards-{owners.elsewhere}.npy"
    for path in (orphan, live, elsewhere):
        path.write_bytes(b"a block")
    store, _, _ = dirichlet_shards(folder)
    kept = sorted(p.name for p in folder.iterdir())
    assert kept == sorted([live.name, elsewhere.name, Path(store.images.filename).name])

    def full_disk(path, dtype, shape, chunks):
        next(iter(chunks))
        path.write_bytes(b"part of a block")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shards_module, "write_npy", full_disk)
    with pytest.raises(OSError, match="No space left"):
        dirichlet_shards(folder)
    assert sorted(p.name for p in folder.iterdir()) == kept
