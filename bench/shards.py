"""Client shards in the object store at 10,000 clients: one block + offsets vs one object per client.

Prints, for each layout, the time to put the shards, the number of objects, and the time for a worker to
read 200 random clients' rows (by reference, zero-copy). raysim uses the single block (raysim/data/shards.py).

    python bench/shards.py [--clients 10000] [--rows-per-client 50]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import ray


@ray.remote(num_cpus=0)
def read_block(store, offsets, clients):
    total = 0
    for c in clients:
        total += (
            int(store["labels"][offsets[c] : offsets[c + 1]].sum())
            + store["images"][offsets[c] : offsets[c + 1]].shape[0]
        )
    return total


@ray.remote(num_cpus=0)
def read_objects(refs_box, clients):
    total = 0
    for c in clients:
        shard = ray.get(refs_box[0][c])
        total += int(shard["labels"].sum()) + shard["images"].shape[0]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rows-per-client", type=int, default=50)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    n = args.clients * args.rows_per_client
    images = np.random.default_rng(0).integers(0, 256, (n, 8, 8), dtype=np.uint8)
    labels = np.arange(n) % 10
    offsets = np.arange(0, n + 1, args.rows_per_client)
    clients = np.random.default_rng(1).choice(args.clients, 200, replace=False)

    start = time.perf_counter()
    block = ray.put({"images": images, "labels": labels})
    put_block = time.perf_counter() - start
    start = time.perf_counter()
    block_total = ray.get(read_block.remote(block, offsets, clients))
    read_block_s = time.perf_counter() - start

    start = time.perf_counter()
    refs = [ray.put({"images": images[lo:hi], "labels": labels[lo:hi]}) for lo, hi in zip(offsets[:-1], offsets[1:])]
    put_objects = time.perf_counter() - start
    start = time.perf_counter()
    objects_total = ray.get(read_objects.remote([refs], clients))
    read_objects_s = time.perf_counter() - start
    assert block_total == objects_total

    print(f"{args.clients} clients x {args.rows_per_client} rows (8x8 uint8); a worker reads 200 random clients")
    print(f"{'layout':32}{'objects':>9}{'put s':>9}{'read 200 s':>12}")
    print(f"{'one block + offsets (raysim)':32}{1:9d}{put_block:9.3f}{read_block_s:12.3f}")
    print(f"{'one object per client':32}{args.clients:9d}{put_objects:9.3f}{read_objects_s:12.3f}")


if __name__ == "__main__":
    main()
