"""The seeds' baselines side by side on one offline setting (issue 19), with FedVPT, SGPT and FGPT for reference.

The ``offline-s10`` preset (the offline counterpart of SGPT/FGPT's CIFAR-100 s=10: glyphs62, 100 clients, 5% per
round, pathological s=10, E=2, 40 rounds, the shipped ViT) with the baselines' options it carries, evaluated every 2
rounds; seeds 0, 1, 2. Columns, mean ± std over the seeds: final global accuracy (all seen clients' test rows pooled,
each client with the parameters it is evaluated with), final local accuracy (mean of per-client accuracies), and
bytes per round (down + up, mean over rounds, MB = 10^6 bytes); then minutes per run.

    python bench/baselines_table.py [--rounds 40] [--seeds 3] [--methods fedmix,moon]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

import numpy as np
from rich.console import Console

from raysim.config import build_config, load_preset, preset_for_method
from raysim.engine.driver import run

PRESET = "offline-s10"
SETTING = {"federation": {"eval_every": 2}}
METHODS = (
    "fedvpt",
    "fedmix",
    "fedsam",
    "moon",
    "harmofl",
    "fedpr",
    "pfedhn",
    "pfedpg",
    "fedem",
    "fed-dualprompt",
    "sgpt",
    "fgpt",
)


def one_run(method: str, seed: int, rounds: int, tracking: str) -> dict[str, float]:
    config = build_config(
        method,
        [
            preset_for_method(load_preset(PRESET), method),
            SETTING,
            {"federation": {"rounds": rounds, "seed": seed}},
            {"tracking": {"tracking_uri": tracking, "experiment": "baselines-table"}},
        ],
    )
    start = time.perf_counter()
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))  # the table is ours
    return {
        "global": result.summary["global_acc"]["final"],
        "local": result.summary["local_acc"]["final"],
        "MB/round": float(np.mean([h["bytes_down"] + h["bytes_up"] for h in result.history])) / 1e6,
        "min": (time.perf_counter() - start) / 60,
    }


def cell(values: list[float], digits: int) -> str:
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--methods", help=f"comma-separated (default: {','.join(METHODS)})")
    args = parser.parse_args()
    methods = args.methods.split(",") if args.methods else METHODS
    print(f"{PRESET}, {args.rounds} rounds, seeds 0..{args.seeds - 1}: mean ± std over seeds\n")
    print("| method | global acc | local acc | MB/round | min/run |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            rows = [one_run(method, seed, args.rounds, f"sqlite:///{tmp}/mlflow.db") for seed in range(args.seeds)]
            columns = {key: [r[key] for r in rows] for key in rows[0]}
            print(
                f"| {method} | {cell(columns['global'], 2)} | {cell(columns['local'], 2)} | "
                f"{cell(columns['MB/round'], 3)} | {np.mean(columns['min']):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
