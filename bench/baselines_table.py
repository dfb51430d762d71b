"""The seeds' baselines side by side on one offline setting (issue 19), with FedVPT, SGPT and FGPT for reference.

The ``offline-s10`` preset (the offline counterpart of SGPT/FGPT's CIFAR-100 s=10: glyphs62, 100 clients, 5% per
round, pathological s=10, E=2, 40 rounds, the shipped ViT) with the baselines' options it carries, evaluated every 2
rounds; seeds 0, 1, 2. Columns, mean ± std over the seeds (ddof 0: the values' own spread): final global accuracy
(all seen clients' test rows pooled, each client with the parameters it is evaluated with), final local accuracy
(mean of per-client accuracies), and bytes per round (down + up, mean over rounds, MB = 10^6 bytes); then minutes per
run. Accuracy cells also give the 95% confidence half-width of the mean (Student's t over the seeds); the global
accuracy of each seed and its difference with the first method named, paired over the seeds (seed s is the same
partition for every method), follow.

Runs go on the sequential backend (it gives the Ray backend's numbers: tests/engine/test_executors.py) with
``--threads`` torch threads, so two invocations with disjoint ``--methods`` share a 2-core machine without Ray's
start-up per run.

    python bench/baselines_table.py [--rounds 40] [--seeds 3] [--threads 2] [--methods fedvpt,fedmix,moon]
                                    [--tracking-uri sqlite:///runs.db]   # keep the runs (default: a temporary store)
                                    [--set data.class_sets=ring ...]     # config overrides, as raysim run's --set
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

import numpy as np
from rich.console import Console

from raysim.config import build_config, load_preset, parse_override, preset_for_method
from raysim.engine.driver import run
from raysim.tracking.statistics import interval, paired

PRESET = "offline-s10"
OWN_KEYS = ("federation.rounds", "federation.seed")  # with resources.* and tracking.*: the script's own arguments
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


def one_run(method: str, seed: int, rounds: int, threads: int, tracking: str, overrides: dict) -> dict[str, float]:
    config = build_config(
        method,
        [
            preset_for_method(load_preset(PRESET), method),
            SETTING,
            preset_for_method(overrides, method),  # another method's options are not this one's to take
            {
                "federation": {"rounds": rounds, "seed": seed},
                "resources": {"backend": "sequential", "threads": threads},
            },
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


def cell_with_ci(values: list[float], digits: int) -> str:
    """mean ± std (ddof 0: the seeds' own spread), then the 95% half-width of the mean in brackets."""
    _, half = interval(values)
    return f"{cell(values, digits)} [±{half:.{digits}f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    parser.add_argument("--methods", help=f"comma-separated (default: {','.join(METHODS)})")
    parser.add_argument("--tracking-uri", help="MLflow store that keeps the runs (default: a temporary one)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = parser.parse_args()
    overrides: dict = {}
    for text in args.overrides:
        section, key, value = parse_override(text)
        if f"{section}.{key}" in OWN_KEYS or section in ("resources", "tracking"):
            flags = "--rounds, --seeds, --threads or --tracking-uri"
            parser.error(f"--set {text}: the script sets {section}.{key} itself; use {flags}")
        overrides.setdefault(section, {})[key] = value
    methods = args.methods.split(",") if args.methods else METHODS
    changed = "".join(f", {text}" for text in args.overrides)
    seeds = f"seeds 0..{args.seeds - 1}"
    print(f"{PRESET}{changed}, {args.rounds} rounds, {seeds}: mean ± std (ddof 0) over seeds [95% CI half-width]\n")
    print(f"| method | global acc | local acc | MB/round | min/run | global by seed | paired with {methods[0]} |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tracking = args.tracking_uri or f"sqlite:///{tmp}/mlflow.db"
        reference = None
        for method in methods:
            rows = [one_run(method, seed, args.rounds, args.threads, tracking, overrides) for seed in range(args.seeds)]
            columns = {key: [r[key] for r in rows] for key in rows[0]}
            by_seed = dict(enumerate(columns["global"]))
            reference = reference or by_seed
            versus = "" if by_seed is reference else "{:+.2f} ± {:.2f} ({}/{})".format(*paired(reference, by_seed))
            print(
                f"| {method} | {cell_with_ci(columns['global'], 2)} | {cell_with_ci(columns['local'], 2)} | "
                f"{cell(columns['MB/round'], 3)} | {np.mean(columns['min']):.1f} | "
                f"{' / '.join(f'{v:.2f}' for v in columns['global'])} | {versus} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
