"""A run whose shard block is a file every process maps (a large population on one machine) keeps none of its
pages: training and evaluation drop the rows' pages once read, and the numbers are those of the block in memory."""

from __future__ import annotations

import numpy as np
import pytest

from raysim.config import build_config
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
