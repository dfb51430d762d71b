"""FedAvg-family (FedVPT) and SGPT under system heterogeneity, 3 seeds: no heterogeneity, stragglers dropped, and
stragglers' partial work; and VPT-deep with and without capacity tiers (docs/systems.md), through ``raysim compare``.

    python bench/systems_table.py [--rounds 8] [--deadline 20] [--seeds 3] [--tiers head,last-2,all]
                                  [raysim compare flags ...]

Each heterogeneous arm runs on the shipped example trace (10 devices taken in turn: 5-150 samples/s, 0.6-7.6 MB/s
down, a quarter of it up, online 40-90% of a compressed 1,800 s day) with a round deadline. The report is compare's:
mean +/- 95% CI over the seeds and the paired difference from FedVPT without heterogeneity, plus accuracy against
virtual time (time_to_accuracy.png). The tiered arm draws each client's tier from ``--tiers`` (a third of the clients
train the head only, a third the prompts of the last 2 blocks, a third everything). Figures land in the comparison's
MLflow run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

METHODS = ("fedvpt", "sgpt")


def arms(deadline: float, tiers: str) -> list[str]:
    clocked = f"systems.trace=example:federation.deadline_s={deadline:g}"
    stragglers = [
        arm
        for method in METHODS
        for arm in (
            method,
            f"{method}:{clocked}:federation.stragglers=drop",
            f"{method}:{clocked}:federation.stragglers=partial",
        )
    ]
    return [*stragglers, "fedvpt-d", f"fedvpt-d:systems.tiers={tiers}"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--deadline", type=float, default=20.0, help="virtual seconds")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tiers", default="head,last-2,all", help="the tiered arm's systems.tiers")
    args, rest = parser.parse_known_args()
    arms_ = arms(args.deadline, args.tiers)
    command = [sys.executable, "-m", "raysim.cli", "compare", *arms_, "--preset", "offline-s10"]
    command += ["--seeds", str(args.seeds), "--rounds", str(args.rounds), "--eval-every", "2"]
    command += ["--experiment", f"systems-table-r{args.rounds}-d{args.deadline:g}-t{args.tiers}", *rest]
    print(" ".join(command), flush=True)
    sys.exit(subprocess.call(command))
