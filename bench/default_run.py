"""The README's main command on the offline default, timed, against FedVPT and against a random backbone.

Runs `raysim run METHOD --clients 100` as a user would (a fresh process each, Ray start-up and data loading
included) for the main method and the baseline with the shipped pretrained backbone, then the main method
with `--set model.pretrained=false`, and prints wall time and the final / last-10 global and worst-local
accuracy. Targets (issues 3 and 4): under 5 minutes, above FedVPT under the same seed, and clearly above
the random-backbone result.

    python bench/default_run.py [--method sgpt] [--baseline fedvpt] [extra raysim run arguments ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(method: str, extra: list[str]) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "raysim.cli",
            "run",
            method,
            "--clients",
            "100",
            "--no-progress",
            "--tracking-uri",
            f"sqlite:///{tmp}/mlflow.db",
            *extra,
        ]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        (summary,) = Path(tmp).glob("artifacts/*/artifacts/summary.json")
        return elapsed, json.loads(summary.read_text())["summary"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="sgpt")
    parser.add_argument("--baseline", default="fedvpt")
    args, extra = parser.parse_known_args()
    print(f"raysim run METHOD --clients 100 {' '.join(extra)}")
    print(f"{'method':8}{'backbone':22}{'wall s':>8}{'global':>9}{'last-10':>9}{'worst':>8}{'last-10':>9}")
    pretrained, random = ("pretrained (shipped)", []), ("random init", ["--set", "model.pretrained=false"])
    for method, (label, flags) in ((args.method, pretrained), (args.baseline, pretrained), (args.method, random)):
        elapsed, summary = run(method, extra + flags)
        acc, worst = summary["global_acc"], summary["worst_local_acc"]
        print(
            f"{method:8}{label:22}{elapsed:8.0f}{acc['final']:9.2f}{acc['mean']:9.2f}{worst['final']:8.2f}"
            f"{worst['mean']:9.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
