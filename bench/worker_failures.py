"""Failures change nothing (issue 8): a run whose client workers are SIGKILLed mid-round every few rounds, and whose
coordinator is killed once, ends with the final metrics of a clean run of the same config.

Ray restarts a killed worker and re-runs its tasks from their inputs; the driver replaces a dead coordinator
from the last checkpoint (written every ``--checkpoint-every`` rounds) and replays the rounds since. Prints
each run's final metrics, the kills, and whether every per-round metric (timings aside) is identical.

    python bench/worker_failures.py [--method fedvpt] [--rounds 30] [--kill-every 3]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import threading
import time

import numpy as np
from rich.console import Console

from raysim.config import build_config, load_preset
from raysim.engine.callbacks import Callback
from raysim.engine.driver import run
from raysim.ops.metrics import TIMING_KEYS
from raysim.testing import chaos

SHOWN = ("global_acc", "local_acc", "worst_local_acc", "train_loss")


class Between(Callback):
    """Calls ``act(round, metrics)`` after each round, in the driver."""

    def __init__(self, act):
        self.act = act

    def after_round(self, round, report) -> bool:
        self.act(round, report.metrics)
        return False


def one_run(args, tracking: str, act=None):
    layers = [
        load_preset("quick"),
        {
            "federation": {"rounds": args.rounds, "participation": 0.5, "eval_every": 1},
            "resources": {"workers": 2, "cpus_per_client": 0.5},
            "checkpoint": {"every": args.checkpoint_every},
            "tracking": {"tracking_uri": tracking, "experiment": "worker-failures"},
        },
    ]
    start = time.perf_counter()
    callbacks = [Between(act)] if act else []
    result = run(
        build_config(args.method, layers), show_progress=False, console=Console(file=io.StringIO()), callbacks=callbacks
    )
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="fedvpt")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--kill-every", type=int, default=3, help="kill a random worker mid-round every k rounds")
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="which worker dies, and when in the round")
    args = parser.parse_args()
    rng, kills, timers = np.random.default_rng(args.seed), [], []

    def chaos_monkey(round, metrics):  # runs between rounds; the timer fires inside the next one
        if round % args.kill_every == 0 and round < args.rounds:
            delay = float(rng.uniform(0.1, 0.5)) * metrics["round_time_s"]
            # the coordinator dies once (rounds replayed after its recovery come here again)
            once = round == 2 * args.kill_every and not any(k[1] == "Coordinator" for k in kills)
            target = "Coordinator" if once else "ClientWorker"
            timers.append(
                threading.Timer(delay, lambda: kills.append((round + 1, target, chaos.kill_actor(target, rng))))
            )
            timers[-1].start()

    with tempfile.TemporaryDirectory() as tmp:
        clean, clean_s = one_run(args, f"sqlite:///{tmp}/mlflow.db")
        chaotic, chaotic_s = one_run(args, f"sqlite:///{tmp}/mlflow.db", chaos_monkey)
    for timer in timers:
        timer.join()
    print(f"{args.method}, quick preset, {args.rounds} rounds, 2 workers, checkpoint every {args.checkpoint_every}")
    for round, target, pid in kills:
        print(f"  round {round}: SIGKILL {target} pid {pid}")
    print(f"{'run':10}{'wall s':>9}" + "".join(f"{k:>17}" for k in SHOWN))
    for name, result, seconds in (("clean", clean, clean_s), ("chaotic", chaotic, chaotic_s)):
        final = result.history[-1]
        print(f"{name:10}{seconds:9.1f}" + "".join(f"{final.get(k, float('nan')):17.6f}" for k in SHOWN))

    def strip(history):
        return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]

    same = strip(clean.history) == strip(chaotic.history)
    print(f"every per-round metric identical: {same} ({len(kills)} kills)")


if __name__ == "__main__":
    main()
