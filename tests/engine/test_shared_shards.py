"""The driver puts the shards in the object store once and keeps that copy, not a second one of its own."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from raysim.config import build_config
from raysim.engine import setup
from raysim.engine.driver import shared
from raysim.testing.smoke import FAST


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "mapped-file"])
def test_the_driver_keeps_the_object_stores_copy(ray_session, monkeypatch, on_disk):
    if on_disk:  # every block is "large": prepare_shards writes it to a file and maps it
        monkeypatch.setattr(setup, "ON_DISK_BYTES", 0)
    shards = setup.prepare_shards(build_config("fedvpt", [FAST]))
    assert isinstance(shards.images, np.memmap) == on_disk
    expected = np.array(shards.images)
    placed, kept = shared(shards)
    del shards
    gc.collect()  # the driver's own block, when it had one, is gone
    again = ray_session.get(placed)  # what a (restarted) coordinator reads
    assert (kept.images == expected).all() and (again.images == expected).all()
    if on_disk:  # the file is the one copy, and stays while the driver maps it
        assert isinstance(kept.images, np.memmap) and Path(kept.images.filename).exists()
    else:  # a read-only view of the object store's copy, the one the coordinator maps
        assert not kept.images.flags.writeable and np.shares_memory(kept.images, again.images)
