"""FedBuff against synchronous rounds at equal simulated time, for FedVPT and SGPT, over seeds (``raysim compare``).

    python bench/async_table.py [--devices lognormal:3,1] [--seeds 3] [--rounds 20] [--methods fedvpt,sgpt]
                                [raysim compare flags ...]
    python bench/async_table.py --devices trace:example

Each method runs synchronously (``--rounds`` rounds of m clients) and asynchronously (FedBuff: concurrency m, a
buffer of m/2, 2x ``--rounds`` server versions, so both train the same number of client updates) on the same
devices: ``lognormal:MU,SIGMA`` speeds or a trace (``trace:example`` is the shipped one). Then, per seed, both runs'
global accuracy is read at the simulated time T both reached (the earlier of their last evaluations; an accuracy
is the last one evaluated by then), and the time each took to reach a target (``--target`` times the synchronous
run's final accuracy in that seed). The table gives the means with 95% intervals, paired seed by seed (the project's
verdict rules: raysim.tracking.statistics). FedBuff's claim (Nguyen et al., AISTATS 2022) is that the buffered
asynchronous run reaches the target in less simulated time.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys

import numpy as np

from raysim.config import load_preset
from raysim.tracking.comparison import cells
from raysim.tracking.statistics import interval, paired

PRESET = "digits-iid"


def devices(spec: str) -> str:
    """The arms' systems setting: ``lognormal:MU,SIGMA`` speeds, or ``trace:NAME``."""
    kind, _, value = spec.partition(":")
    return f"systems.trace={value}" if kind == "trace" else f"systems.speed={spec}"


def arms(methods: list[str], spec: str, rounds: int, per_round: int) -> list[str]:
    buffered = f"federation.mode=async:federation.buffer={max(1, per_round // 2)}:federation.rounds={2 * rounds}"
    return [arm for m in methods for arm in (f"{m}:{devices(spec)}", f"{m}:{devices(spec)}:{buffered}")]


def accuracy_at(curve: tuple[list[float], list[float]], time: float) -> float:
    """The last accuracy evaluated at or before ``time`` (NaN if none was)."""
    times, accuracy = curve
    seen = [a for t, a in zip(times, accuracy) if t <= time]
    return seen[-1] if seen else math.nan


def time_to(curve: tuple[list[float], list[float]], target: float) -> float:
    """The simulated time of the first evaluation at or above ``target`` (inf if none reached it)."""
    return next((t for t, a in zip(*curve) if a >= target), math.inf)


def table(uri: str, experiment: str, target: float) -> str:
    found = cells(uri, experiment)
    by_arm: dict[str, dict[int, dict]] = {}
    for run in found:
        by_arm.setdefault(run["method"], {})[run["seed"]] = run
    lines = [
        "| method | T (s, mean) | sync acc at T | FedBuff acc at T | FedBuff - sync | sync time to target (s) | "
        "FedBuff time to target (s) | FedBuff / sync time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for sync_arm, async_arm in zip(
        sorted(a for a in by_arm if "async" not in a), sorted(a for a in by_arm if "async" in a)
    ):
        sync, buffered = by_arm[sync_arm], by_arm[async_arm]
        at, s_acc, a_acc, s_time, a_time, ratio = [], {}, {}, {}, {}, {}
        for seed in sorted(set(sync) & set(buffered)):
            s_curve, a_curve = sync[seed]["timed_curve"], buffered[seed]["timed_curve"]
            t = min(s_curve[0][-1], a_curve[0][-1])
            at.append(t)
            s_acc[seed], a_acc[seed] = accuracy_at(s_curve, t), accuracy_at(a_curve, t)
            goal = target * s_curve[1][-1]
            s_time[seed], a_time[seed] = time_to(s_curve, goal), time_to(a_curve, goal)
            ratio[seed] = a_time[seed] / s_time[seed]
        diff, half, agree, seeds = paired(s_acc, a_acc)

        def shown(values: dict[int, float]) -> str:
            finite = [v for v in values.values() if np.isfinite(v)]
            mean, width = interval(finite)
            missing = len(values) - len(finite)
            return f"{mean:.2f} ± {width:.2f}" + (f" ({missing} never)" if missing else "")

        lines.append(
            f"| {sync_arm.split(':')[0]} | {np.mean(at):.0f} | {shown(s_acc)} | {shown(a_acc)} | "
            f"{diff:+.2f} ± {half:.2f} ({agree}/{seeds} seeds agree) | {shown(s_time)} | {shown(a_time)} | "
            f"{shown(ratio)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="lognormal:3,1", help="lognormal:MU,SIGMA speeds, or trace:NAME")
    parser.add_argument("--rounds", type=int, default=20, help="synchronous rounds (FedBuff runs 2x versions)")
    parser.add_argument("--per-round", type=int, default=10, help="m, the clients a synchronous round")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--methods", default="fedvpt,sgpt", help="comma-separated")
    parser.add_argument("--target", type=float, default=0.9, help="share of the synchronous run's final accuracy")
    parser.add_argument("--tracking-uri", default="sqlite:///raysim-runs/mlflow.db")
    args, rest = parser.parse_known_args()
    experiment = f"async-table-{args.devices.replace(':', '-').replace(',', '-')}-r{args.rounds}-m{args.per_round}"
    compared = arms(args.methods.split(","), args.devices, args.rounds, args.per_round)
    command = [sys.executable, "-m", "raysim.cli", "compare", *compared]
    clients = load_preset(PRESET)["federation"]["clients"]  # m = per_round of them a round, and FedBuff's concurrency
    command += ["--preset", PRESET, "--participation", str(args.per_round / clients)]
    command += ["--seeds", str(args.seeds), "--rounds", str(args.rounds)]
    command += ["--eval-every", "1", "--experiment", experiment, "--tracking-uri", args.tracking_uri, *rest]
    print(" ".join(command), flush=True)
    if subprocess.call(command):
        sys.exit(1)
    print(table(args.tracking_uri, experiment, args.target))
