"""Accuracy at a privacy budget: methods under user-level differential privacy at several epsilons, over seeds.

One ``raysim compare`` per epsilon on the offline default (glyphs62, Dirichlet 0.5, the shipped ViT-Tiny) with
``--clients`` clients and ``--participation`` of them a round, drawn by Poisson sampling (``federation.sampling=
poisson``: the accountant's event is Poisson-sampled Gaussian, neighbours add or remove one client), in every arm,
the non-private one (epsilon ``inf``) included. A private arm runs DP-FedAvg (McMahan et al., ICLR 2018) with
``privacy.target_epsilon`` at ``--delta`` and adaptive clipping at the median update norm (Andrew et al., NeurIPS
2021), so that no method's clip is tuned: every method runs at the same presets, a tuning budget of 0.

Then prints, per method and epsilon, the final global accuracy (mean and 95% t interval over the seeds), each
method's drop from its own non-private accuracy paired by seed, and every other method's drop against the first
method's, paired by seed, with the project's verdict: prompt tuning "loses less accuracy than full fine-tuning at
the same budget" (fewer numbers to noise) is **reproduced** where the paired interval of (drop of the other method -
drop of the first) lies below 0, **not reproduced** where it lies above, **inconclusive** where it spans 0.

    python bench/privacy_table.py                                           # fedavg, fedvpt; inf, 4, 1; 3 seeds
    python bench/privacy_table.py --methods fedavg,fedvpt,sgpt,fgpt --epsilons inf,8,4,1 --rounds 30
    python bench/privacy_table.py --raysim-args "--max-concurrent 2 --workers 1"   # two runs at once, 1 CPU each
"""

from __future__ import annotations

import argparse
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

STATISTIC = ("global_acc", "final")


def compare_command(args: argparse.Namespace, epsilon: str) -> list[str]:
    """The ``raysim compare`` of one epsilon (``inf``: without DP)."""
    command = [
        "raysim",
        "compare",
        *args.methods.split(","),
        f"--clients={args.clients}",
        f"--participation={args.participation}",
        f"--rounds={args.rounds}",
        f"--seeds={args.seeds}",
        f"--tracking-uri={args.tracking_uri}",
        f"--experiment={experiment(args, epsilon)}",
        "--set",
        "federation.sampling=poisson",
        *shlex.split(args.raysim_args),
    ]
    if epsilon != "inf":
        for setting in ("mode=user", f"target_epsilon={epsilon}", f"delta={args.delta}", "clip=adaptive:0.5"):
            command += ["--set", f"privacy.{setting}"]
    return command


def experiment(args: argparse.Namespace, epsilon: str) -> str:
    """One epsilon's comparison at these settings: another --rounds, --clients, --participation or --delta is
    another comparison (more --methods or --seeds add cells to the same one)."""
    return f"privacy-table-eps-{epsilon}-n{args.clients}-q{args.participation:g}-r{args.rounds}" + (
        "" if epsilon == "inf" else f"-d{args.delta}"
    )


def accuracies(args: argparse.Namespace, epsilon: str) -> dict[str, dict[int, float]]:
    """{method: {seed: final global accuracy}} of one epsilon's comparison: the methods and seeds 0 .. --seeds - 1
    asked for (an earlier call may have run more)."""
    from raysim.tracking.comparison import cells

    found: dict[str, dict[int, float]] = {}
    for run in cells(args.tracking_uri, experiment(args, epsilon)):
        if run["method"] in args.methods.split(",") and run["seed"] < args.seeds:
            found.setdefault(run["method"], {})[run["seed"]] = run["summary"][STATISTIC]
    return found


def verdict(mean: float, half: float) -> str:
    if math.isnan(half):
        return "one seed: no verdict"
    if mean + half < 0:
        return "reproduced"
    return "not reproduced" if mean - half > 0 else "inconclusive"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="fedavg,fedvpt", help="Comma-separated; the first is paired with.")
    parser.add_argument("--epsilons", default="inf,4,1", help="Comma-separated; inf: without DP (needed).")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--participation", type=float, default=0.1)
    parser.add_argument("--delta", default="1e-5")
    parser.add_argument("--store", default="bench-privacy", help="Folder of the runs' MLflow store.")
    parser.add_argument("--raysim-args", default="", help="Extra arguments for raysim compare.")
    args = parser.parse_args()
    epsilons = args.epsilons.split(",")
    if "inf" not in epsilons:
        parser.error("--epsilons must include inf: every drop is taken from the method's non-private accuracy")
    store = Path(args.store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    args.tracking_uri = f"sqlite:///{store / 'mlflow.db'}"

    for epsilon in epsilons:  # a rerun resumes: raysim compare keeps the finished cells
        command = compare_command(args, epsilon)
        print("$ " + " ".join(command), flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=store)
        print(f"epsilon {epsilon}: {(time.perf_counter() - start) / 60:.1f} min", flush=True)

    from raysim.tracking.statistics import interval, paired

    found = {epsilon: accuracies(args, epsilon) for epsilon in epsilons}
    methods = args.methods.split(",")
    first = methods[0]
    print(f"\nfinal global accuracy (%), {args.seeds} seeds, mean ± 95% t interval; drops paired by seed\n")
    print(f"| method | epsilon | accuracy | drop from epsilon inf | drop minus {first}'s | verdict |")
    print("|---|---|---|---|---|---|")
    for method in methods:
        for epsilon in epsilons:
            values = found[epsilon][method]
            mean, half = interval(list(values.values()))
            cells = [method, epsilon, f"{mean:.2f} ± {half:.2f}", "", "", ""]
            if epsilon != "inf":
                drop = {s: found["inf"][method][s] - v for s, v in values.items() if s in found["inf"][method]}
                d, h, agree, n = paired({s: 0.0 for s in drop}, drop)
                cells[3] = f"{d:+.2f} ± {h:.2f} ({agree} of {n} seeds)"
                if method != first:
                    base = {s: found["inf"][first][s] - v for s, v in found[epsilon][first].items()}
                    d, h, agree, n = paired(base, drop)
                    cells[4], cells[5] = f"{d:+.2f} ± {h:.2f} ({agree} of {n} seeds)", verdict(d, h)
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
