"""FedGCR evidence on the offline benchmark (issue 5): the paper's orderings, measured, in one table.

The ``offline-digit5-dif10`` preset (the paper's Digit-Five setting offline: digits5's five domains as client
types, partition ``domains`` with the domain imbalance factor DIF, 22 clients, all of them every round, E = 1,
AdamW 1e-3, batch 32), evaluated every 2 rounds, seed 0; every run sees the same clients and data.

Rows (DIF 10): FedVPT (FedAvg on prompts), the fairness baselines q-FFL, AFL, TERM, then FedGCR and its
halves FedGC and FedGR (Table 5), FedGCR in the authors'-code form (cosine contrast, their FedGR, lambdas 0.1),
and FedGCR with T' = 3 and 6 (Table 3/4); (DIF 1): FedVPT, q-FFL, FedGCR. Columns: Avg (mean client
accuracy), sigma_type, sigma_client (population std of per-type means / of client accuracies), each as the
mean of the last 10 evaluations as the paper reports, the final global accuracy, and the clustering accuracy
(share of clients whose cluster's majority type is their own; last round).

    python bench/fedgcr_table.py [--rounds 20] [--only "dif10 fedgcr,dif10 fedvpt"]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

from rich.console import Console

from raysim.config import build_config, load_preset, preset_for_method
from raysim.engine.driver import run

PRESET = "offline-digit5-dif10"
SETTING = {"federation": {"eval_every": 2, "seed": 0}}
RUNS = {
    "dif10 fedvpt": ("fedvpt", 10, {}),
    "dif10 qffl": ("qffl", 10, {}),
    "dif10 afl": ("afl", 10, {}),
    "dif10 term": ("term", 10, {}),
    "dif10 fedgc": ("fedgc", 10, {}),
    "dif10 fedgr": ("fedgr", 10, {}),
    "dif10 fedgcr": ("fedgcr", 10, {}),
    "dif10 fedgcr code": (
        "fedgcr",
        10,
        {
            "fedgcr": {
                "contrast": "code",
                "reweighting": "code",
                "client_loss": "global",
                "lambda1": 0.1,
                "lambda2": 0.1,
            }
        },
    ),
    "dif10 fedgcr T'=3": ("fedgcr", 10, {"fedgcr": {"clusters": 3}}),
    "dif10 fedgcr T'=6": ("fedgcr", 10, {"fedgcr": {"clusters": 6}}),
    "dif1 fedvpt": ("fedvpt", 1, {}),
    "dif1 qffl": ("qffl", 1, {}),
    "dif1 fedgcr": ("fedgcr", 1, {}),
}
COLUMNS = ("Avg", "sig_type", "sig_client", "global", "clust acc", "min")


def one_run(method: str, dif: float, layer: dict, rounds: int, tracking: str) -> dict[str, float]:
    config = build_config(
        method,
        [
            preset_for_method(load_preset(PRESET), method),
            SETTING,
            {"federation": {"rounds": rounds}, "data": {"dif": dif}},
            layer,
            {"tracking": {"tracking_uri": tracking, "experiment": "fedgcr-bench"}},
        ],
    )
    start = time.perf_counter()
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))  # the table is ours
    s = result.summary
    return {
        "Avg": s["avg_acc"]["mean"],
        "sig_type": s["sigma_type"]["mean"],
        "sig_client": s["sigma_client"]["mean"],
        "global": s["global_acc"]["final"],
        "clust acc": result.history[-1].get("cluster_acc", float("nan")),
        "min": (time.perf_counter() - start) / 60,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--only", help="comma-separated row names (default: all)")
    args = parser.parse_args()
    names = [n for n in RUNS if not args.only or n in args.only.split(",")]
    print(
        f"preset {PRESET} (digits5 / domains, 22 clients, all every round), {args.rounds} rounds, seed 0; "
        f"Avg and sigmas: mean of the last 10 evaluations"
    )
    print(f"{'run':20}" + "".join(f"{c:>11}" for c in COLUMNS))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            method, dif, layer = RUNS[name]
            row = one_run(method, dif, layer, args.rounds, f"sqlite:///{tmp}/mlflow.db")
            print(f"{name:20}" + "".join(f"{row[c]:11.2f}" for c in COLUMNS), flush=True)


if __name__ == "__main__":
    main()
