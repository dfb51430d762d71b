"""What the driver receives per round, and what each checkpoint writes, for stateful methods at 100 clients.

Runs Ditto (a personal model per client) and FedGCR (h_prev and z_prev per client) on the Ray backend for a few
rounds with ``checkpoint.every=1``, and prints per round the pickled size of the round's report (all the driver
receives) and the bytes of client state the coordinator's checkpoint wrote (only the clients that changed).

    python bench/driver_bytes.py [--rounds 3] [--backbone raysim_vit_nano_p4_16]
"""

from __future__ import annotations

import argparse
import logging
import pickle
import tempfile
from pathlib import Path

import ray

from raysim.config import build_config
from raysim.engine.callbacks import Checkpointing
from raysim.engine.driver import make_simulation, stop
from raysim.engine.ray_session import PoolReservation
from raysim.testing.smoke import prepared
from raysim.tracking.checkpoint import CLIENTS, Checkpoint

SETTINGS = {
    "ditto": {"data": {"dataset": "synthetic", "partition": "dirichlet"}},
    "fedgcr": {"data": {"dataset": "synthetic", "partition": "domains"}, "fedgcr": {"clusters": 3}},
}


def measure(method: str, rounds: int, backbone: str) -> None:
    layers = [
        {
            "federation": {"clients": 100, "rounds": rounds, "participation": 0.1, "eval_every": 1},
            "model": {"backbone": backbone, "pretrained": False},
            "resources": {"workers": 2, "cpus_per_client": 0.5},
            "checkpoint": {"every": 1, "keep": 2},
        },
        SETTINGS[method],
    ]
    config, initial, shards = prepared(build_config(method, layers))
    with tempfile.TemporaryDirectory() as tmp, PoolReservation(config) as reservation:
        start = Checkpoint("bench", 0, config.to_dict(), initial, {}, "")
        pool = reservation.start(config, shards.info.num_classes)
        simulation = make_simulation(config, shards, start, pool, [Checkpointing(Path(tmp), "", {})])
        try:
            for round in range(1, rounds + 1):
                report = simulation.run_round(round)
                written = Path(tmp) / CLIENTS / f"round-{round:06d}.safetensors"
                size = written.stat().st_size if written.exists() else 0
                print(
                    f"{method:7} round {round}: driver received {len(pickle.dumps(report)):>8,} bytes; "
                    f"checkpoint wrote {size:>11,} bytes of client state",
                    flush=True,
                )
        finally:
            stop(simulation, graceful=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backbone", default="raysim_vit_nano_p4_16")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    for method in SETTINGS:
        measure(method, args.rounds, args.backbone)


if __name__ == "__main__":
    main()
