"""A data set whose decoded images exceed the machine's memory, end to end: generate it, run raysim on it cold (the
first run decodes it) and warm (the next run maps the decoded copy), and print the peak memory of the process tree.

    python bench/larger_than_memory.py --folder /var/tmp/ltm            # 2,000,000 64x64 PNGs, 1,000,000 clients
    python bench/larger_than_memory.py --folder DIR --rows 200000 --clients 100000    # a tenth, to try it first
    python bench/larger_than_memory.py --folder DIR --runs warm         # only the warm run (the copy exists)

The parquet (``DIR/data-ROWS.parquet``, kept between invocations, since writing it takes most of the time) holds
``--rows`` 64x64 RGB PNGs in 10 classes: each a class pattern of 8x8-pixel cells, shifted and dimmed per image, so
the PNGs stay small (about 1 kB) and the decoded copy is 12,288 bytes a row (24.6 GB for 2,000,000). It is
written in row groups of 20,000, the PNGs encoded by one process per CPU. Every fifth row is a test row.

Each run is ``raysim run fedvpt`` on it with ``--clients`` registered clients split IID, 10 a round, 3 rounds, the
ViT-Tiny architecture from random initialisation with a 4-token prompt, evaluated after the last round on a fixed
sample of 100 clients (``federation.eval_clients``); its decode cache is ``DIR/cache``. Prints per run
bench/scale.py's figures of it (wall time, start-up: process start to the end of the first round, less that round;
the first and the steady round, the median of rounds 2-3; evaluation, accuracy, peak RSS and PSS summed over the
process tree, processes), the disk space the run added (a cold run's decode cache, which is also its shard block)
and the PSS by process at the peak; then the size of the decode cache.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from scale import raysim_figures  # bench/ is not a package

CLASSES, SIZE, CELL, GROUP = 10, 64, 8, 20_000


def chunk_table(start: int, rows: int, seed: int):
    """Rows ``start:start + rows`` of the data set (the same rows whichever process writes them)."""
    from raysim.data.parquet import png_table

    patterns = np.random.default_rng(seed).random((CLASSES, SIZE // CELL, SIZE // CELL, 3))
    rng = np.random.default_rng([seed, start])
    labels = rng.integers(0, CLASSES, rows)
    shifts = rng.integers(0, CELL, (rows, 2))
    dims = rng.uniform(0.6, 1.0, rows)
    cells = np.kron(patterns[labels], np.ones((1, CELL, CELL, 1)))
    images = np.empty((rows, SIZE, SIZE, 3), np.uint8)
    for i in range(rows):
        images[i] = 255 * dims[i] * np.roll(cells[i], tuple(shifts[i]), axis=(0, 1))
    split = np.where(np.arange(start, start + rows) % 5 == 0, "test", "train")
    return png_table(images, labels, split)


def _chunk(args: tuple[int, int, int]):
    return chunk_table(*args)


def write_parquet(path: Path, rows: int, seed: int = 0) -> None:
    """``rows`` rows in row groups of ``GROUP``, written as the processes encode them (in order)."""
    import pyarrow.parquet as pq

    partial = path.with_name(path.name + ".partial")
    jobs = [(start, min(GROUP, rows - start), seed) for start in range(0, rows, GROUP)]
    writer, begun = None, time.time()
    with multiprocessing.Pool(os.cpu_count()) as pool:
        for done, table in enumerate(pool.imap(_chunk, jobs), 1):
            writer = writer or pq.ParquetWriter(str(partial), table.schema)
            writer.write_table(table)
            if done % 10 == 0 or done == len(jobs):
                print(f"  wrote {done * GROUP:,} of {rows:,} rows in {time.time() - begun:.0f} s", flush=True)
    writer.close()
    partial.rename(path)


def raysim_run(data: Path, folder: Path, clients: int, name: str) -> dict:
    """bench/scale.py's figures of one run (its store in ``folder/name``), and the disk space the run added."""
    tmp = folder / name
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    disk_before = shutil.disk_usage(folder).used
    figures = raysim_figures(data, clients, 10, ["--set", "federation.eval_clients=100"], tmp, rounds=3)
    return {**figures, "disk GB": (shutil.disk_usage(folder).used - disk_before) / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="where the parquet and the decode cache go")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--clients", type=int, default=1_000_000)
    parser.add_argument("--runs", default="cold,warm", help="cold (remove the decode cache first), warm, or both")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    data = args.folder / f"data-{args.rows}.parquet"
    if not data.exists():
        print(f"writing {data} ({args.rows:,} rows)", flush=True)
        write_parquet(data, args.rows)
    print(f"parquet: {data.stat().st_size / 1e9:.2f} GB; decoded: {args.rows * SIZE * SIZE * 3 / 1e9:.1f} GB")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(f"memory: {total / 2**30:.1f} GiB; CPUs: {os.cpu_count()}", flush=True)
    for name in args.runs.split(","):
        if name == "cold":
            shutil.rmtree(args.folder / "cache", ignore_errors=True)
        figures = raysim_run(data, args.folder, args.clients, name)
        at_peak = figures.pop("at peak")
        print(f"{name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items()), flush=True)
        print("  PSS at the peak, MB by process: " + ", ".join(f"{n} {mb:,.0f}" for n, mb in at_peak.items()))
    caches = list((args.folder / "cache").glob("parquet-*.npy"))
    print("decode cache: " + ", ".join(f"{c.name} {c.stat().st_size / 1e9:.2f} GB" for c in caches))


if __name__ == "__main__":
    main()
