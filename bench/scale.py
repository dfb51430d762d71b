"""What a user waits for: raysim's console script against a hand-written single-process loop, at several scales.

Both run the same work in one invocation: a parquet file of 32x32 RGB images in 10 classes split IID over the
clients, the default ViT-Tiny architecture from random init with a 4-token VPT-shallow prompt and head, SGD 0.01,
batch 32, one local epoch, the same clients per round, 5 rounds, evaluated after the last on every client's test
rows (raysim's ``federation.eval_clients=0``: its default evaluates a sample of 10,000 clients above that many). For
each it prints wall time (process start to exit), start-up (process start to the first round), the first and the
steady round (median of rounds 2-4), evaluation time, the final test accuracy (%), peak RSS and PSS summed over the
process tree (sampled from /proc), the most processes alive at once, and each figure as a ratio to the plain loop
(accuracy: the difference in points); then raysim's PSS at its peak by process.

    python bench/scale.py                       # 100 x 200 (5 a round), 1,000 x 20 and 10,000 x 20 (10 a round)
    python bench/scale.py --scales 100000x5     # CLIENTSxROWS[:PER_ROUND], comma-separated
    python bench/scale.py --raysim-args "--set train.cohort=off"   # extra raysim run arguments
    python bench/scale.py --warm-cache          # raysim's second run on each file: start-up without the decode
    python bench/scale.py --pairs 3             # 3 alternated loop/raysim pairs per scale, then the median ratio

A pair runs the loop and raysim one after the other, the loop first in odd pairs and raysim first in even ones: on a
shared VM the CPU's speed drifts within minutes (the loop alone took 1.2-1.8 s a round at 1,000 x 20 within one
hour), so one pair's ratio can be off by a fifth; the median over alternated pairs is the figure to quote.

The plain loop (``--plain``, run in its own process by this script) reads the parquet with pyarrow, partitions it with
raysim's partition function and seed, and trains with raysim's model builder and ``raysim.testing.reference`` (FedAvg
by hand), none of its engine: the same clients, rows, batches and initial model, so its accuracy should equal
raysim's up to float rounding (tests/engine/test_reference_loop.py holds the engine to that loop on a tiny run).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from raysim.testing.chaos import descendants

ROUNDS, CLASSES, SIZE = 5, 10, 32
TRAIN = ["--set", "train.optimizer=sgd", "--set", "train.lr=0.01", "--set", "train.batch_size=32"]


def write_parquet(path: Path, rows: int, seed: int = 0) -> None:
    """``rows`` 32x32 RGB PNG images: a smooth class pattern under noise; 80% train, 20% test."""
    import pyarrow.parquet as pq

    from raysim.data.parquet import png_table

    rng = np.random.default_rng(seed)
    patterns = rng.random((CLASSES, 4, 4, 3))
    labels = rng.integers(0, CLASSES, rows)
    writer, chunk = None, 20_000
    for start in range(0, rows, chunk):
        part = labels[start : start + chunk]
        base = np.kron(patterns[part], np.ones((1, 8, 8, 1)))
        images = np.clip(255 * (0.7 * base + 0.3 * rng.random((len(part), SIZE, SIZE, 3))), 0, 255).astype(np.uint8)
        split = np.where(np.arange(start, start + len(part)) % 5 == 0, "test", "train")
        table = png_table(images, part, split)
        writer = writer or pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table)
    writer.close()


def process_name(pid: int) -> str:
    """A short name for a process of the tree: Ray's title (``ray::ClientWorker``, ``raylet``) or the script."""
    words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    words = [w.decode(errors="replace") for w in words if w]
    title = words[0] if words else "?"
    if title.startswith("ray::"):
        return title.split(".")[0].split()[0]
    script = next((w for w in words[1:] if not w.startswith("-")), "")
    return Path(title).name + (" " + Path(script).name if Path(title).name.startswith("python") else "")


class TreeSampler:
    """Peak RSS and PSS (MB) summed over a process and its descendants, the most processes alive at once, and the
    PSS of each process (by name) at the PSS peak.

    RSS comes from ``/proc/PID/statm`` every ``every_s`` (microseconds a process). PSS needs ``smaps_rollup``, which
    walks a process's page tables (70 ms for raysim's tree of 10 processes on an AMD EPYC), so reading it every
    0.25 s took over a fifth of a core from the run it measured, ten times what it took from the one-process loop. It
    is read when the tree's RSS passes its highest yet by 1% (PSS <= RSS, and both grow as the tree loads) and every
    ``pss_every_s`` besides."""

    def __init__(self, pid: int, every_s: float = 0.25, pss_every_s: float = 5.0):
        self.pid, self.every_s, self.pss_every_s = pid, every_s, pss_every_s
        self.peak_rss = self.peak_pss = 0.0
        self.peak_processes = 0
        self.at_peak: dict[str, float] = {}
        self._page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        read_at_rss, read_at_s = 0.0, 0.0
        while not self._stop.is_set():
            pids = [self.pid, *descendants(self.pid)]
            rss = sum(self._rss(pid) for pid in pids)
            if rss > 1.01 * read_at_rss or time.monotonic() - read_at_s >= self.pss_every_s:
                self._read_pss(pids)
                read_at_rss, read_at_s = max(read_at_rss, rss), time.monotonic()
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_processes = max(self.peak_processes, len(pids))
            self._stop.wait(self.every_s)

    def _rss(self, pid: int) -> float:
        try:
            return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self._page_mb
        except (OSError, IndexError):
            return 0.0

    def _read_pss(self, pids: list[int]) -> None:
        by_name: dict[str, float] = {}
        for pid in pids:
            try:
                name = process_name(pid)
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        by_name[name] = by_name.get(name, 0.0) + int(line.split()[1]) / 1024
                        break
            except OSError:
                continue
        pss = sum(by_name.values())
        if pss > self.peak_pss:
            self.peak_pss, self.at_peak = pss, by_name

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measured(command: list[str], env: dict) -> tuple[float, TreeSampler, str]:
    start = time.time()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(process.pid)
    out, _ = process.communicate()
    sampler.stop()
    if process.returncode:
        raise SystemExit(f"{shlex.join(command)} failed:\n{out[-3000:]}")
    return start, sampler, out


def raysim_figures(data: Path, clients: int, per_round: int, extra: list[str], tmp: Path, rounds: int = ROUNDS) -> dict:
    """One ``raysim run``'s figures (``rounds`` rounds, evaluated after the last), its MLflow store in ``tmp`` and its
    decode cache in the bench's temporary folder (``data``'s), which goes with it: the user's cache would keep a
    decoded copy of every file the bench wrote."""
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp}/mlflow.db"
    command = [
        "raysim",
        "run",
        "fedvpt",
        "--dataset",
        "parquet",
        "--data-dir",
        str(data),
        "--clients",
        str(clients),
        "--participation",
        str(per_round / clients),
        "--rounds",
        str(rounds),
        "--local-epochs",
        "1",
        "--partition",
        "iid",
        "--eval-every",
        str(rounds),
        "--workers",
        "1",
        "--cpus-per-client",
        "2",
        "--precision",
        "fp32",
        "--tracking-uri",
        store,
        "--no-progress",
        *TRAIN,
        "--set",
        "fedvpt.prompt_length=4",
        "--set",
        "model.pretrained=false",
        "--set",
        "checkpoint.every=0",
        "--set",
        "federation.eval_clients=0",  # every client's test rows, as the loop scores them (the default samples 10,000)
        *extra,
    ]
    start, sampler, _ = measured(command, {**os.environ, "RAYSIM_CACHE": str(data.parent / "cache")})
    wall = time.time() - start
    client = MlflowClient(store)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = {m.step: m for m in client.get_metric_history(run.info.run_id, "round_time_s")}
    first_end = history[1].timestamp / 1000
    rounds = [history[r].value for r in sorted(history)]
    throughput = [
        m.value for m in sorted(client.get_metric_history(run.info.run_id, "train_samples_per_s"), key=lambda m: m.step)
    ]
    evaluation = client.get_metric_history(run.info.run_id, "eval_time_s")[-1].value
    accuracy = client.get_metric_history(run.info.run_id, "global_acc")[-1].value
    return {
        "wall": wall,
        "start-up": first_end - rounds[0] - start,
        "first round": rounds[0],
        "steady round": float(np.median(rounds[1:4])),
        "samples/s": float(np.median(throughput[1:4])),
        "evaluation": evaluation,
        "accuracy": accuracy,
        "peak RSS MB": sampler.peak_rss,
        "peak PSS MB": sampler.peak_pss,
        "processes": sampler.peak_processes,
        "at peak": sampler.at_peak,
    }


def plain_figures(data: Path, clients: int, per_round: int) -> dict:
    start, sampler, out = measured(
        [sys.executable, __file__, "--plain", str(data), str(clients), str(per_round)], dict(os.environ)
    )
    wall = time.time() - start
    figures = json.loads(out.strip().splitlines()[-1])
    figures["start-up"] -= start
    return {
        "wall": wall,
        **figures,
        "peak RSS MB": sampler.peak_rss,
        "peak PSS MB": sampler.peak_pss,
        "processes": sampler.peak_processes,
    }


def plain_loop(data: str, clients: int, per_round: int) -> None:
    """The same workload in one process, no raysim engine; prints its figures as one JSON line."""
    import pyarrow.parquet as pq
    import torch
    from PIL import Image

    from raysim.base.preprocess import to_model_input
    from raysim.base.seeding import Purpose, derive_seed
    from raysim.config import build_config
    from raysim.core.registry import get_method
    from raysim.data.partition import PartitionParams, partition
    from raysim.models.factory import build_model
    from raysim.testing.reference import fedavg_rounds

    torch.set_num_threads(2)
    table = pq.read_table(data)
    images = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in table["image"].to_pylist()])
    labels, is_test = table["label"].to_numpy(), table["split"].to_numpy(zero_copy_only=False) == "test"
    config = build_config(
        "fedvpt", [{"fedvpt": {"prompt_length": 4}, "model": {"pretrained": False}, "federation": {"clients": clients}}]
    )
    model = build_model(config, get_method("fedvpt").cls(config), CLASSES)
    size, mean, std = model.input_spec
    seed, train_rows, no_domain = config.federation.seed, np.flatnonzero(~is_test), np.zeros(len(labels), np.int64)
    owner = partition(  # raysim's IID split with its seed (a pure function): the clients hold the same rows
        "iid",
        train_labels=labels[~is_test],
        train_domains=no_domain[~is_test],
        test_labels=labels[is_test],
        test_domains=no_domain[is_test],
        num_classes=CLASSES,
        num_domains=1,
        num_clients=clients,
        params=PartitionParams(),
        seed=derive_seed(seed, Purpose.PARTITION),
    ).train_client
    by_client = [train_rows[owner == c] for c in range(clients)]
    names = model.trainable_names()
    params = dict(model.named_parameters())
    reference = fedavg_rounds(
        model,
        lambda client: (images[by_client[client]], labels[by_client[client]]),
        {k: params[k].detach().clone() for k in names},
        clients=clients,
        per_round=per_round,
        rounds=ROUNDS,
        seed=seed,
        batch_size=32,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, weight_decay=1e-5),
    )
    rounds, started, begin = [], time.time(), time.perf_counter()
    for state in reference:
        rounds.append(time.perf_counter() - begin)
        global_state, begin = state, time.perf_counter()
    begin = time.perf_counter()
    with torch.no_grad():
        for k in names:
            params[k].copy_(global_state[k])
        test = np.flatnonzero(is_test)
        correct = sum(
            int(
                (
                    model(to_model_input(torch.tensor(images[test[s : s + 256]]), size, mean, std)).argmax(1)
                    == torch.tensor(labels[test[s : s + 256]])
                ).sum()
            )
            for s in range(0, len(test), 256)
        )
    evaluation = time.perf_counter() - begin
    print(
        json.dumps(
            {
                "start-up": started,
                "first round": rounds[0],
                "steady round": float(np.median(rounds[1:4])),
                "evaluation": evaluation,
                "accuracy": 100 * correct / len(test),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scales",
        default="100x200:5,1000x20:10,10000x20:10",
        help="CLIENTSxROWS[:CLIENTS_PER_ROUND], comma-separated (rows per client, train and test)",
    )
    parser.add_argument("--raysim-args", default="", help="extra arguments for raysim run")
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="measure raysim's second run on each file (its images already decoded), as after a first experiment",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="alternated loop/raysim pairs per scale; with 2 or more, their median ratio",
    )
    parser.add_argument("--plain", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain_loop(args.plain[0], int(args.plain[1]), int(args.plain[2]))
        return
    keys = ("wall", "start-up", "first round", "steady round", "evaluation", "accuracy")
    keys += ("peak RSS MB", "peak PSS MB", "processes")
    print("| scale | run | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    peaks = []
    for scale in args.scales.split(","):
        shape, _, per_round = scale.partition(":")
        clients, rows = (int(v) for v in shape.split("x"))
        per_round = int(per_round or 10)
        label, pair_ratios = f"{clients:,} x {rows} ({per_round}/round)", []
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            data = tmp / "data.parquet"
            write_parquet(data, clients * rows)
            extra = shlex.split(args.raysim_args)
            if args.warm_cache:  # a first run decodes the parquet into the cache the measured runs then map
                (tmp / "warm-up").mkdir()
                raysim_figures(data, clients, per_round, extra, tmp / "warm-up")
            for pair in range(args.pairs):
                figures = {}
                for side in ("plain", "raysim") if pair % 2 == 0 else ("raysim", "plain"):
                    if side == "plain":
                        figures[side] = plain_figures(data, clients, per_round)
                        continue
                    if not args.warm_cache:  # every measured run decodes anew, as the first one did
                        shutil.rmtree(tmp / "cache", ignore_errors=True)
                    (tmp / f"measured-{pair}").mkdir()
                    figures[side] = raysim_figures(data, clients, per_round, extra, tmp / f"measured-{pair}")
                plain, ours = figures["plain"], figures["raysim"]
                run = f"{label}{f' pair {pair + 1}' if args.pairs > 1 else ''}"
                for name, values in (("plain loop", plain), ("raysim", ours)):
                    cells = [f"{values[k]:,.1f}" if isinstance(values[k], float) else f"{values[k]:,}" for k in keys]
                    print(f"| {run} | {name} | " + " | ".join(cells) + " |")
                pair_ratios.append({k: ratio(ours[k], plain[k], k) for k in keys})
                print(f"| {run} | raysim / plain | " + " | ".join(shown(pair_ratios[-1], keys)) + " |", flush=True)
        if args.pairs > 1:
            median = {k: float(np.median([r[k] for r in pair_ratios])) for k in keys}
            print(f"| {label} | median of {args.pairs} pairs | " + " | ".join(shown(median, keys)) + " |", flush=True)
        peaks.append((label, ours["at peak"]))
    for label, at_peak in peaks:
        parts = ", ".join(f"{name} {mb:,.0f}" for name, mb in sorted(at_peak.items(), key=lambda item: -item[1]))
        print(f"\nraysim's PSS at its peak, {label}, MB by process: {parts}")


def ratio(ours: float, plain: float, key: str) -> float:
    """raysim against the loop: the difference in points for accuracy, else the ratio (NaN where the loop's is 0)."""
    return ours - plain if key == "accuracy" else ours / plain if plain else float("nan")


def shown(ratios: dict[str, float], keys: tuple[str, ...]) -> list[str]:
    """raysim / plain per figure as printed (accuracy: the difference in points); a zero in the loop's gives "-"."""
    return [
        f"{ratios[k]:+.1f} pt" if k == "accuracy" else f"{ratios[k]:.2f}x" if np.isfinite(ratios[k]) else "-"
        for k in keys
    ]


if __name__ == "__main__":
    main()
