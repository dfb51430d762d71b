"""SGPT / FGPT evidence on the offline benchmark (issue 4): the papers' orderings, measured, in one table.

glyphs62, 100 clients, participation 0.05, pathological s = 6 (about 10% of the 62 classes per client, as
s = 10 of CIFAR-100's 100 in the papers), E = 2, 40 rounds, evaluated every 2; every run uses the same seed,
so they see the same clients and data.

Rows: FedVPT; SGPT and its ablations (SGPT Table 3: joint / BCD-Inv; Table 4: no q_g, no momentum); FGPT and
FGPT-U with K = 2 and 5. Columns: global and worst-local accuracy (final and mean of the last 10 evaluations),
the share of test rows in the largest group and the number of groups holding >= 1% of them (collapse),
clustering accuracy against glyphs62's coarse labels (digit / upper / lower), congruence with centralised
K-Means, and the selection instability (std over the second half's evaluations of each client's share of
test rows per group, mean over clients and groups; SGPT Fig. 3). Then FGPT-U's measured inference cost
against FGPT, next to (u + K (U - u)) / U.

    python bench/sgpt_ablation.py [--rounds 40] [--only sgpt,fedvpt] [--cost-only]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

import numpy as np
import torch
from rich.console import Console

from raysim.algorithms._group_prompts import evaluation_counts
from raysim.config import build_config
from raysim.core.training import model_inputs
from raysim.data.shards import ClientData
from raysim.engine.client import ClientRuntime
from raysim.engine.driver import run
from raysim.ops import selection as sel
from raysim.testing.smoke import prepared

SETTING = {
    "federation": {"clients": 100, "participation": 0.05, "eval_every": 2, "seed": 0},
    "train": {"local_epochs": 2},
    "data": {"dataset": "glyphs62", "partition": "pathological", "s": 6},
}
RUNS = {
    "fedvpt": ("fedvpt", {}),
    "sgpt": ("sgpt", {}),
    "sgpt joint": ("sgpt", {"sgpt": {"bcd": "joint"}}),
    "sgpt bcd-inv": ("sgpt", {"sgpt": {"bcd": "bcd-inv"}}),
    "sgpt no q_g": ("sgpt", {"sgpt": {"key_rule": "plain"}}),
    "sgpt no momentum": ("sgpt", {"sgpt": {"momentum": False}}),
    "fgpt": ("fgpt", {}),
    "fgpt-u K=2": ("fgpt-u", {"fgpt": {"k": 2}}),
    "fgpt-u K=5": ("fgpt-u", {"fgpt": {"k": 5}}),
}
COLUMNS = ("global", "g last10", "worst", "w last10", "top share", "groups", "clust acc", "congr", "instab", "min")


def one_run(method: str, layer: dict, rounds: int, tracking: str) -> dict[str, float]:
    config = build_config(
        method,
        [
            SETTING,
            {"federation": {"rounds": rounds}},
            layer,
            {"tracking": {"tracking_uri": tracking, "experiment": "sgpt-ablation"}},
        ],
    )
    start = time.perf_counter()
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))  # the table is ours
    last = result.history[-1]
    out = {
        "global": result.summary["global_acc"]["final"],
        "g last10": result.summary["global_acc"]["mean"],
        "worst": result.summary["worst_local_acc"]["final"],
        "w last10": result.summary["worst_local_acc"]["mean"],
        "min": (time.perf_counter() - start) / 60,
    }
    if "cluster_top_share" in last:
        out.update(
            {
                "top share": last["cluster_top_share"],
                "groups": last["cluster_groups_used"],
                "clust acc": last.get("cluster_acc", float("nan")),
                "congr": last["kmeans_congruence"],
                "instab": sel.instability(evaluation_counts(result.records)),
            }
        )
    return out


@torch.no_grad()
def inference_cost(ks=(1, 2, 5), rows: int = 512, repeats: int = 3) -> list[tuple[int, float, float]]:
    """(K, measured time ratio to K = 1, (u + K (U - u)) / U) for FGPT-U's forward on ``rows`` test rows."""
    config = build_config("fgpt-u", [SETTING, {"fgpt": {"k": max(ks)}, "resources": {"backend": "sequential"}}])
    config, _, shards = prepared(config)
    runtime = ClientRuntime(config, shards.info.num_classes)
    model = runtime.model
    test = slice(shards.test_offsets[0], shards.test_offsets[0] + rows)
    data = ClientData(
        shards.images[test], shards.labels[test], shards.domains[test], {"query": shards.features["query"][test]}
    )
    index = np.arange(len(data))
    x = model_inputs(model, data.images, runtime.device)
    depth = len(model.vit.blocks)
    u = runtime.method.group_block(depth)
    timings = {}
    for k in ks:
        method = type(runtime.method)(build_config("fgpt-u", [SETTING, {"fgpt": {"k": k}}]))
        method.predict(model, x[:32], data, index[:32])  # warm-up
        timings[k] = min(_timed(lambda: method.predict(model, x, data, index)) for _ in range(repeats))
    return [(k, timings[k] / timings[1], (u + k * (depth - u)) / depth) for k in ks]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--only", help="comma-separated row names (default: all)")
    parser.add_argument("--cost-only", action="store_true", help="only the FGPT-U inference-cost measurement")
    args = parser.parse_args()
    names = [n for n in RUNS if not args.only or n in args.only.split(",")]
    if not args.cost_only:
        print(f"glyphs62, 100 clients, participation 0.05, pathological s=6, E=2, {args.rounds} rounds, seed 0")
        print(f"{'run':18}" + "".join(f"{c:>10}" for c in COLUMNS))
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                method, layer = RUNS[name]
                row = one_run(method, layer, args.rounds, f"sqlite:///{tmp}/mlflow.db")
                print(f"{name:18}" + "".join(f"{row.get(c, float('nan')):10.2f}" for c in COLUMNS), flush=True)
    print("FGPT-U inference cost vs FGPT (K = 1), 512 rows, best of 3")
    print(f"{'K':>3}{'measured':>10}{'formula':>10}{'rel. diff':>11}")
    for k, measured, formula in inference_cost():
        print(f"{k:>3}{measured:10.2f}{formula:10.2f}{100 * (measured / formula - 1):10.1f}%")


if __name__ == "__main__":
    main()
