"""The README's main command on the offline default, timed, against the same run on a random backbone.

Runs `raysim run fedvpt --clients 100` as a user would (a fresh process each, Ray start-up and data loading
included) with the shipped pretrained backbone and with `--set model.pretrained=false`, and prints wall
time and the final / last-10 global accuracy. Targets (issue 3): under 5 minutes, and clearly above the
random-backbone result.

    python bench/default_run.py [--method fedvpt] [extra raysim run arguments ...]
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
        command = [sys.executable, "-m", "raysim.cli", "run", method, "--clients", "100", "--no-progress",
                   "--tracking-uri", f"sqlite:///{tmp}/mlflow.db", *extra]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        (summary,) = Path(tmp).glob("artifacts/*/artifacts/summary.json")
        return elapsed, json.loads(summary.read_text())["summary"]["global_acc"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="fedvpt")
    args, extra = parser.parse_known_args()
    print(f"raysim run {args.method} --clients 100 {' '.join(extra)}")
    print(f"{'backbone':22}{'wall s':>8}{'final global':>14}{'last-10 mean':>14}")
    for label, flags in (("pretrained (shipped)", []), ("random init", ["--set", "model.pretrained=false"])):
        elapsed, acc = run(args.method, extra + flags)
        print(f"{label:22}{elapsed:8.0f}{acc['final']:14.2f}{acc['mean']:14.2f}")


if __name__ == "__main__":
    main()
