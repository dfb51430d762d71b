"""The driver puts the shards in the object store once and keeps that copy, not a second one of its own."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from raysim.data.partition import PartitionParams, partition
from raysim.data.shards import DatasetInfo, build_shards
from raysim.engine.driver import shared


def _shards(folder):
    n = 120
    labels = np.arange(n) % 4
    arrays = {
        "image": np.arange(n, dtype=np.uint8)[:, None, None].repeat(3, 1).repeat(3, 2),
        "label": labels,
        "domain": np.zeros(n, np.int64),
        "is_test": np.arange(n) % 5 == 0,
    }
    test = arrays["is_test"]
    part = partition(
        "iid",
        train_labels=labels[~test],
        train_domains=arrays["domain"][~test],
        test_labels=labels[test],
        test_domains=arrays["domain"][test],
        num_classes=4,
        num_domains=1,
        num_clients=6,
        params=PartitionParams(),
        seed=0,
    )
    return build_shards(DatasetInfo("t", 4, 1, (3, 3)), arrays, part, unseen=(), folder=folder)


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "mapped-file"])
def test_the_driver_keeps_the_object_stores_copy(ray_session, tmp_path, on_disk):
    shards = _shards(tmp_path / "shards" if on_disk else None)
    expected = np.array(shards.images)
    placed, kept = shared(shards)
    del shards
    gc.collect()  # the driver's own block, when it had one, is gone
    again = ray_session.get(placed)  # what a (restarted) coordinator reads
    assert (kept.images == expected).all() and (again.images == expected).all()
    if on_disk:  # the file is the one copy, and stays while the driver maps it
        assert isinstance(kept.images, np.memmap) and (tmp_path / "shards").exists()
    else:  # a read-only view of the object store's copy, the one the coordinator maps
        assert not kept.images.flags.writeable and np.shares_memory(kept.images, again.images)
