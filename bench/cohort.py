"""Cohort training against the one-client-at-a-time loop: samples/s of a round, on CPUs or on a GPU.

The workload of ``bench/scale.py`` (a parquet of 32x32 images split IID, fedvpt with a 4-token prompt and head on
ViT-Tiny from random init, SGD 0.01, batch 32, one local epoch, 5 rounds), written once and run through the
``raysim`` console script once per setting: ``off`` (clients one at a time) and ``on:K`` (cohorts of K clients,
``train.cohort_size``). For each it prints the steady round (median of rounds 2-4), the round's training samples
per second (``train_samples_per_s``, the round's samples over its wall time), the ratio to ``off``, the final
accuracy, the tree's peak PSS and, where ``nvidia-smi`` answers, the GPU's peak memory in use.

    python bench/cohort.py                                            # 1,000 x 20, 10 a round, 2 CPU cores
    python bench/cohort.py --scale 1000x20:40 --settings off,on:8,on:40 --raysim-args "--gpus-per-client 1"
    python bench/cohort.py --raysim-args "--gpus-per-client 0.5 --workers 2"   # two workers share the GPU
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from scale import raysim_figures, write_parquet


class GpuMemory:
    """The GPU's peak memory in use (MiB, all processes) while it runs, read from ``nvidia-smi`` every 0.5 s."""

    def __init__(self):
        self.peak = 0
        self._process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            if line.strip().isdigit():
                self.peak = max(self.peak, int(line))

    def stop(self) -> int:
        self._process.terminate()
        self._thread.join()
        return self.peak


def setting_args(setting: str) -> list[str]:
    """``off`` or ``on:K`` as ``raysim run`` arguments."""
    mode, _, size = setting.partition(":")
    if mode not in ("off", "on") or (mode == "on") != size.isdigit():
        raise SystemExit(f"setting {setting!r} is not 'off' or 'on:K' (K clients in a cohort)")
    return ["--set", f"train.cohort={mode}"] + (["--set", f"train.cohort_size={size}"] if size else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1000x20:10", help="CLIENTSxROWS:CLIENTS_PER_ROUND")
    parser.add_argument("--settings", default="off,on:10", help="comma-separated: off, on:K")
    parser.add_argument("--raysim-args", default="", help="extra arguments for raysim run, e.g. --gpus-per-client 1")
    args = parser.parse_args()
    shape, _, per_round = args.scale.partition(":")
    clients, rows = (int(v) for v in shape.split("x"))
    per_round = int(per_round or 10)
    settings = args.settings.split(",")
    for setting in settings:
        setting_args(setting)
    gpu = shutil.which("nvidia-smi") is not None
    print(f"{clients:,} clients x {rows} rows, {per_round} a round; raysim run ... {args.raysim_args}")
    print("| setting | steady round s | samples/s | vs off | accuracy | peak PSS MB | peak GPU MiB |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data.parquet"
        write_parquet(data, clients * rows)
        base = None
        for i, setting in enumerate(settings):
            (tmp / str(i)).mkdir()
            memory = GpuMemory() if gpu else None
            try:
                figures = raysim_figures(
                    data, clients, per_round, shlex.split(args.raysim_args) + setting_args(setting), tmp / str(i)
                )
            except SystemExit as failure:  # one setting's failure (out of device memory, say) leaves the others
                print(f"| {setting} | failed: {str(failure)[-1500:]!r} |", flush=True)
                continue
            finally:
                peak_gpu = f"{memory.stop():,}" if memory else "-"
            base = base or (figures["samples/s"] if setting == "off" else None)
            ratio = f"{figures['samples/s'] / base:.2f}x" if base else "-"
            print(
                f"| {setting} | {figures['steady round']:.3f} | {figures['samples/s']:,.0f} | {ratio} "
                f"| {figures['accuracy']:.2f} | {figures['peak PSS MB']:,.0f} | {peak_gpu} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
