"""Every method from one command, on both backends, as a newcomer runs it: no flag but a small size, a fresh process
each, and every line it prints (Ray's forwarded worker lines included) searched for warn|error.

    python bench/every_method.py                       # raysim run METHOD --clients 20 --rounds 1, Ray and sequential
    python bench/every_method.py --tune                # also raysim tune METHOD --num-samples 1 --rounds 1, every space
    python bench/every_method.py --methods fedgcr,sgpt --backends sequential
    python bench/every_method.py --backends '' --tune  # the sweeps alone

Prints one row a command (exit code, seconds, the first noisy line) and exits 1 if any command failed or printed a
line matching warn|error. Runs in a temporary folder each (its own MLflow store and checkpoints); the data cache is
the user's (``$RAYSIM_CACHE``), so data sets are generated once.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from importlib import resources

from raysim.core.registry import METHODS

NOISE = re.compile(r"warn|error", re.IGNORECASE)


def spaces() -> list[str]:
    """The methods with a shipped search space (``raysim tune METHOD`` without --space)."""
    return sorted(
        p.name[: -len(".yaml")] for p in resources.files("raysim.tune_spaces").iterdir() if p.name.endswith(".yaml")
    )


def attempt(args: list[str]) -> tuple[int, float, list[str]]:
    """(exit code, seconds, the lines matching warn|error) of ``raysim ARGS`` in a new folder."""
    with tempfile.TemporaryDirectory() as folder:
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "raysim.cli", *args], cwd=folder, capture_output=True, text=True)
        seconds = time.monotonic() - began
    lines = (done.stdout + done.stderr).splitlines()
    return (
        done.returncode,
        seconds,
        [line for line in lines if NOISE.search(line)] + (lines[-3:] if done.returncode else []),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", help="comma-separated (default: every registered method)")
    parser.add_argument("--backends", default="ray,sequential")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--tune", action="store_true", help="also one-trial sweeps over every shipped space")
    options = parser.parse_args()
    methods = options.methods.split(",") if options.methods else list(METHODS)
    commands = [
        ["run", m, "--clients", str(options.clients), "--rounds", "1", "--no-progress", "--backend", backend]
        for backend in filter(None, options.backends.split(","))
        for m in methods
    ]
    if options.tune:
        commands += [["tune", m, "--num-samples", "1", "--rounds", "1"] for m in spaces() if m in methods]
    bad = 0
    for args in commands:
        code, seconds, noisy = attempt(args)
        bad += bool(code or noisy)
        print(
            f"{'ok ' if not (code or noisy) else 'BAD'} rc={code:<3} {seconds:6.1f}s  raysim {' '.join(args)}",
            flush=True,
        )
        for line in noisy[:5]:
            print(f"      {line[:240]}", flush=True)
    print(f"{len(commands) - bad} of {len(commands)} commands ran to the end with no line matching warn|error")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
