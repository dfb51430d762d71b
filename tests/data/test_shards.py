import gc

import numpy as np
import pytest

from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import DatasetInfo, build_shards


def row_images(n: int) -> np.ndarray:
    """2x2 images that carry their row r: r // 256 in the first pixel, r % 256 in the second."""
    images = np.zeros((n, 2, 2), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 1] = np.arange(n) // 256, np.arange(n) % 256
    return images


def row_ids(images: np.ndarray) -> list[int]:
    return (images[:, 0, 0].astype(int) * 256 + images[:, 0, 1]).tolist()


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "mapped-file"])
def test_shards_are_contiguous_per_client_and_match_the_partition(on_disk, tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    labels, domains = rng.integers(0, 5, n), np.zeros(n, dtype=np.int64)
    is_test = np.arange(n) % 4 == 0
    arrays = {
        "image": row_images(n),
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
    folder = tmp_path / "shards" if on_disk else None
    shards = build_shards(DatasetInfo("t", 5, 1, (2, 2)), arrays, part, unseen=(3,), folder=folder)
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
