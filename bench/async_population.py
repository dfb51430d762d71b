"""Asynchronous mode at population scale: FedBuff with 100,000 registered clients, 100 in flight and a buffer of 10,
to 200 server versions, and the peak memory of the run's process tree.

    python bench/async_population.py [--clients 100000] [--rows 5] [--versions 200] [--concurrency 100]
                                     [--buffer 10] [--devices lognormal:3,1] [raysim run flags ...]

The data are bench/scale.py's parquet (32x32 PNGs in 10 classes, IID; ``--rows`` per client, train and test); the
model is its random-init ViT-Tiny with a 4-token prompt. The run evaluates once, after the last version, on
``federation.eval_clients`` clients. Prints the wall time, the virtual time reached, the mean staleness of the last
version, and peak RSS and PSS summed over the process tree (bench/scale.py's sampler).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from raysim.tracking.report import collect

sys.path.insert(0, str(Path(__file__).parent))
from scale import TRAIN, measured, write_parquet  # bench/ is not a package

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=5, help="rows per client, train and test")
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--buffer", type=int, default=10)
    parser.add_argument("--devices", default="lognormal:3,1", help="systems.speed, or trace:NAME")
    args, rest = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "population.parquet"
        write_parquet(data, args.clients * args.rows)
        uri = f"sqlite:///{tmp}/mlflow.db"
        kind, _, name = args.devices.partition(":")
        devices = f"systems.trace={name}" if kind == "trace" else f"systems.speed={args.devices}"
        command = [
            sys.executable, "-m", "raysim.cli", "run", "fedvpt", "--dataset", "parquet", "--data-dir", str(data),
            "--clients", str(args.clients), "--participation", str(args.concurrency / args.clients),
            "--rounds", str(args.versions), "--eval-every", str(args.versions), "--partition", "iid", "--no-progress",
            "--tracking-uri", uri, *TRAIN,
            "--set", "model.pretrained=false", "--set", "checkpoint.every=0", "--set", "federation.mode=async",
            "--set", f"federation.concurrency={args.concurrency}", "--set", f"federation.buffer={args.buffer}",
            "--set", devices, *rest,
        ]  # fmt: skip
        print(shlex.join(command), flush=True)
        start, sampler, out = measured(command, {**os.environ, "RAYSIM_CACHE": str(tmp / "cache")})
        wall = time.time() - start
        final = collect(uri, "raysim")[0]["metrics"]
        nan = float("nan")
        print(out[-1500:])
        print(
            f"wall {wall:.0f} s; virtual time {final.get('sim_time_s', nan):.0f} s; last version's staleness "
            f"mean {final.get('staleness_mean', nan):.2f}, max {final.get('staleness_max', nan):.0f}; "
            f"peak RSS {sampler.peak_rss:,.0f} MB, peak PSS {sampler.peak_pss:,.0f} MB over at most "
            f"{sampler.peak_processes} processes"
        )
