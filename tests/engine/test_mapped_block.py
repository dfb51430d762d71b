"""A run whose shard block is a file every process maps (a large population on one machine) keeps none of its
pages: training and evaluation drop the rows' pages once read, and the numbers are those of the block in memory."""

from __future__ import annotations

import numpy as np

from raysim.config import build_config
from raysim.engine import setup
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing.memory import resident_kb
from raysim.testing.smoke import FAST, open_simulation

SEQUENTIAL = {"resources": {"backend": "sequential"}}


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


def test_training_and_evaluation_keep_no_page_of_a_mapped_block(monkeypatch):
    config = build_config("fedvpt", [FAST, SEQUENTIAL])
    in_memory = rounds(config, None)
    monkeypatch.setattr(setup, "ON_DISK_BYTES", 0)  # every block is "large": written to a file and mapped
    shards = setup.prepare_shards(config)
    assert on_disk(shards)
    mapped = rounds(config, shards)
    assert [r["mapped_kb"] for r in mapped] == [0] * config.federation.rounds
    timing = TIMING_KEYS | {"mapped_kb"}
    same = [{k: v for k, v in r.items() if k not in timing} for r in mapped]
    assert same == [{k: v for k, v in r.items() if k not in timing} for r in in_memory]
    shards.test(0).images.sum()
    assert resident_kb(shards.images.filename) > 0  # read through the map, a client's rows count here
