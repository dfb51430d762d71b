"""The engine's cost per applied update in asynchronous mode against a synchronous round's per client: FedVPT on the
same clients and devices, C = K = m (so a server version applies as many updates as a round), sync and async runs
alternated in one process each.

    python bench/async_overhead.py [--clients 1000] [--per-round 10] [--rounds 12] [--pairs 2]
                                   [--dataset synthetic] [--backend sequential|ray] [--workers 1]

Each run is an untracked simulation (``raysim.testing.smoke.open_simulation``): the random-init ViT-Tiny with a
4-token prompt, SGD 0.01, batch 32, lognormal(3, 0.5) device speeds, no evaluation until the end. Per round after the
first it takes the wall time and, on the sequential backend, the process's CPU time, which other work on the machine
disturbs less (on Ray the workers train). It prints their medians and async's ratio to sync. On ``synthetic`` (1-2
rows a client) the round is nearly all engine; ``digits`` trains a little more.
"""

from __future__ import annotations

import argparse
import statistics
import time

from raysim.config import build_config
from raysim.testing.smoke import open_simulation


def per_round(mode: str, args) -> tuple[float, float]:
    """(median wall s, median CPU s) of rounds 2.. of one run."""
    layers = [
        {
            "federation": {"clients": args.clients, "participation": args.per_round / args.clients},
            "data": {"dataset": args.dataset, "partition": "iid"},
            "model": {"pretrained": False},
            "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 32},
            "systems": {"speed": "lognormal:3,0.5"},
            "resources": {"backend": args.backend, "workers": args.workers},
        },
        {"federation": {"rounds": args.rounds, "eval_every": args.rounds, "seed": 0}},
    ]
    if mode == "async":
        layers.append({"federation": {"mode": "async"}})
    walls, cpus = [], []
    with open_simulation(build_config("fedvpt", layers)) as (simulation, _, _):
        for round in range(1, args.rounds):  # the last round evaluates
            wall, cpu = time.perf_counter(), time.process_time()
            simulation.run_round(round)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return statistics.median(walls[1:]), statistics.median(cpus[1:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--backend", default="sequential", choices=("sequential", "ray"))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if args.backend == "ray":
        import logging

        import ray

        ray.init(include_dashboard=False, logging_level=logging.WARNING)  # a local Ray on this machine's CPUs
    figures = {"sync": [], "async": []}
    for pair in range(args.pairs):
        for mode in ("sync", "async") if pair % 2 == 0 else ("async", "sync"):
            figures[mode].append(per_round(mode, args))
            wall, cpu = figures[mode][-1]
            print(f"pair {pair + 1} {mode}: wall {wall:.3f} s, CPU {cpu:.3f} s a round", flush=True)
    wall = {mode: statistics.median(w for w, _ in runs) for mode, runs in figures.items()}
    cpu = {mode: statistics.median(c for _, c in runs) for mode, runs in figures.items()}
    print(
        f"median a round: sync wall {wall['sync']:.3f} s / CPU {cpu['sync']:.3f} s, async wall {wall['async']:.3f} s / "
        f"CPU {cpu['async']:.3f} s; async / sync: wall {wall['async'] / wall['sync']:.2f}x, CPU "
        f"{cpu['async'] / cpu['sync']:.2f}x ({args.backend}, {args.clients} clients, {args.per_round} a round)"
    )
