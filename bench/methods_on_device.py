"""Every registered method for two rounds on this machine's device: which run, which fail, and how.

Each method runs its smoke setting (``raysim.testing.smoke``: 6 synthetic clients, the nano backbone, the sequential
backend, in this process) on the device raysim picks here (the GPU where there is one), once one client at a time
and, for the methods that train in cohorts, once in cohorts. It prints a row per run: the device, the seconds, the
final global accuracy or the error's last line and where it was raised. On a CPU machine every row should read
"ok"; the suite covers these runs there. Its use is a GPU machine, where no test runs: the first GPU run found
cohort training failing on every GPU, which no CPU test could see.

    python bench/methods_on_device.py                  # every method
    python bench/methods_on_device.py sgpt fedv ditto  # some
"""

from __future__ import annotations

import argparse
import time
import traceback

import torch

from raysim.core.registry import METHODS
from raysim.models.factory import pick_device
from raysim.testing.smoke import run_rounds, smoke_config

# the clients (and split learning's server) take the GPU where there is one
GPU = {"gpus_per_client": 1.0, "server_gpus": 1.0} if torch.cuda.is_available() else {}


def outcome(method: str, cohort: str) -> str:
    start = time.perf_counter()
    try:
        layer = {"train": {"cohort": cohort, "precision": "fp32"}, "resources": GPU}
        _, reports, _ = run_rounds(smoke_config(method, layer))
    except Exception as error:  # a method's failure is this bench's finding, not its end
        frames = [f for f in traceback.extract_tb(error.__traceback__) if "raysim" in f.filename]
        where = f" at {'/'.join(frames[-1].filename.rsplit('/', 2)[-2:])}:{frames[-1].lineno}" if frames else ""
        return f"FAILED: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}{where}"
    accuracy = reports[-1].metrics.get("global_acc", float("nan"))
    return f"ok in {time.perf_counter() - start:.1f} s, global {accuracy:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", help="method names (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}; valid: {', '.join(sorted(METHODS))}")
    device = pick_device(GPU.get("gpus_per_client", 0.0))
    failed = 0
    print(f"device: {device}")
    print("| method | clients | outcome |")
    print("|---|---|---|")
    for method in args.methods or sorted(METHODS):
        for cohort in ("off", "on") if METHODS[method].cohort else ("off",):
            result = outcome(method, cohort)
            failed += result.startswith("FAILED")
            print(f"| {method} | {'in cohorts' if cohort == 'on' else 'one at a time'} | {result} |", flush=True)
    print(f"{failed} failed")


if __name__ == "__main__":
    main()
