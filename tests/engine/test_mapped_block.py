"""A run whose shard block is a file every process maps (a large population on one machine) keeps none of its
pages: training and evaluation drop the rows' pages once read, and the numbers are those of the block in memory."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from raysim.config import build_config
from raysim.data.parquet import png_table
from raysim.data.sources import cache_dir
from raysim.engine import setup
from raysim.engine.client import ClientRuntime
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.memory import resident_kb
from raysim.testing.smoke import FAST, open_simulation

SEQUENTIAL = {"resources": {"backend": "sequential"}}
EVERY_OTHER_ROUND = {"federation": {"eval_every": 2}}  # round 1 trains only: its reads are training's


def rounds(config, shards) -> list[dict]:
    """Every round's metrics, and after each round the block's pages this process still maps (kB)."""
    with open_simulation(config, shards) as (simulation, _, shards):
        reports = []
        for round in range(1, config.federation.rounds + 1):
            metrics = simulation.run_round(round).metrics
            reports.append({**metrics, "mapped_kb": resident_kb(shards.images.filename) if on_disk(shards) else 0})
        return reports


def on_disk(shards) -> bool:
    return isinstance(shards.images, np.memmap)


@pytest.mark.parametrize("method", ["fedvpt", "ditto"])  # clients evaluated together, and one by one (personalised)
def test_training_and_evaluation_keep_no_page_of_a_mapped_block(monkeypatch, method):
    fast = {section: values for section, values in FAST.items() if section in ("federation", "data", "train", "model")}
    config = build_config(method, [fast, SEQUENTIAL, EVERY_OTHER_ROUND])
    in_memory = rounds(config, None)
    monkeypatch.setattr(setup, "ON_DISK_BYTES", 0)  # every block is "large": written to a file and mapped
    shards = setup.prepare_shards(config)
    assert on_disk(shards)
    forward, held = ClientRuntime._correct, []

    def correct(runtime, data):  # each evaluation forward: what the block's map holds as it starts
        held.append(resident_kb(shards.images.filename))
        return forward(runtime, data)

    monkeypatch.setattr(ClientRuntime, "_correct", correct)
    mapped = rounds(config, shards)
    assert [r["mapped_kb"] for r in mapped] == [0] * config.federation.rounds
    assert len(held) >= 2 and held == [0] * len(held)  # the rows evaluated before were dropped, not only at the end
    timing = TIMING_KEYS | {"mapped_kb"}
    same = [{k: v for k, v in r.items() if k not in timing} for r in mapped]
    assert same == [{k: v for k, v in r.items() if k not in timing} for r in in_memory]
    shards.test(0).images.sum()
    assert resident_kb(shards.images.filename) > 0  # read through the map, a client's rows count here


def test_a_decoded_parquet_is_the_block_itself(monkeypatch, tmp_path):
    """A data set decoded into the cache is the run's block as it is (no copy in client order), and the numbers are
    those of the block in memory."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 160)
    images = (rng.random((160, 16, 16, 3)) * 64 + labels[:, None, None, None] * 48).astype(np.uint8)
    pq.write_table(png_table(images, labels, np.where(np.arange(160) % 5 == 0, "test", "train")), tmp_path / "d.pq")
    layers = [
        {
            "federation": {"clients": 12, "rounds": 2, "participation": 0.25, "seed": 3, "eval_every": 2},
            "data": {"dataset": "parquet", "data_dir": str(tmp_path / "d.pq"), "partition": "iid"},
            "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
            "fedvpt": {"prompt_length": 2},
        },
        SEQUENTIAL,
    ]
    config = build_config("fedvpt", layers)
    in_memory = rounds(config, None)
    monkeypatch.setattr(setup, "ON_DISK_BYTES", 0)
    written = set((cache_dir() / "shards").glob("*"))
    shards = setup.prepare_shards(config)
    assert shards.image_rows is not None and str(shards.images.filename).startswith(str(cache_dir() / "parquet-"))
    assert set((cache_dir() / "shards").glob("*")) == written  # no copy of the block in client order
    mapped = rounds(config, shards)
    assert [r["mapped_kb"] for r in mapped] == [0] * config.federation.rounds
    timing = TIMING_KEYS | {"mapped_kb"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in mapped] == [
        {k: v for k, v in r.items() if k not in timing} for r in in_memory
    ]
