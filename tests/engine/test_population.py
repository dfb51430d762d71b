"""A registered population of 100,000 clients: a round touches its cohort only, and client states exist only for
the clients that took part."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raysim.base.seeding import evaluated_clients
from raysim.config import build_config
from raysim.testing.smoke import open_simulation

CLIENTS = 100_000


@pytest.fixture(scope="module")
def population_parquet(tmp_path_factory):
    """One 16x16 training image per client and 2,000 test images, 10 classes, as a fixed-shape tensor column."""
    rng = np.random.default_rng(0)
    rows = CLIENTS + 2_000
    labels = rng.integers(0, 10, rows)
    images = np.repeat((labels * 25).astype(np.uint8)[:, None], 16 * 16 * 3, axis=1).reshape(rows, 16, 16, 3)
    column = pa.FixedShapeTensorArray.from_numpy_ndarray(images)
    split = np.where(np.arange(rows) < CLIENTS, "train", "test")
    path = tmp_path_factory.mktemp("population") / "population.parquet"
    pq.write_table(pa.table({"image": column, "label": labels, "split": split}), path)
    return path


def test_states_exist_only_for_the_clients_sampled(ray_session, population_parquet):
    config = build_config(
        "fedrod",
        [
            {
                "federation": {
                    "clients": CLIENTS,
                    "participation": 10 / CLIENTS,
                    "rounds": 2,
                    "eval_every": 2,
                    "seed": 3,
                },
                "data": {"dataset": "parquet", "data_dir": str(population_parquet), "partition": "iid"},
                "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
                "resources": {"backend": "sequential"},
            }
        ],
    )
    with open_simulation(config) as (simulation, _, shards):
        assert shards.num_clients == CLIENTS and (shards.train_sizes() == 1).all()
        sampled = [set(simulation.run_round(r).sampled) for r in (1, 2)]
        assert len(simulation.clients) == len(sampled[0] | sampled[1]) == 20 - len(sampled[0] & sampled[1])
        assert len(simulation.eval_seen) == config.federation.eval_clients  # a fixed sample of 10,000 evaluated


def test_evaluated_sample_is_fixed_by_the_seed_and_covers_held_out_clients():
    fed = build_config("fedvpt", [{"federation": {"clients": 20, "eval_clients": 5, "seed": 1}}]).federation
    seen, unseen = list(range(16)), [16, 17, 18, 19]
    first = evaluated_clients(fed, seen, unseen)
    assert first == evaluated_clients(fed, seen, unseen) and len(first[0]) + len(first[1]) == 5
    assert set(first[0]) <= set(seen) and set(first[1]) <= set(unseen)
    everyone = build_config("fedvpt", [{"federation": {"clients": 20, "eval_clients": 0}}]).federation
    assert evaluated_clients(everyone, seen, unseen) == (seen, unseen)
