"""FedV/FedVZ evidence on offline data (issue 6): accuracy against the baselines, the server's peak memory, and
where a round's time goes.

Accuracy: glyphs62 with the pretrained offline ViT (``raysim_vit_tiny_p4_32``), the paper's Table 2 settings scaled
down: 30 clients, 20% per round, E = 1, batch 16, AdamW 5e-4 for every method, seed 0, evaluated every 2 rounds;
Dirichlet(0.3) and pathological (s = 10 of 62 classes). FedV/FedVZ/FESTA average heads and tails every
``fedround`` = rounds / 4 rounds (the paper: 20 of 500) with FedV's lr_server 1e-6 (FESTA: 1e-3; the "lr1e-4" rows
show what a server step 100x larger does). Columns: local
(mean client accuracy, each client with the model it keeps: FedV's own head and tail, Ditto's personal model) and
global (all test rows), the mean of the last 10 evaluations, then the minutes the run took.

Memory: the server's peak resident memory (ru_maxrss) over one round's server work for 4 clients of batch 8 on
a DeiT-S encoder (12 blocks, width 384, random init), each variant in a fresh process: FedV (forward/backward per
step, then the true-gradient update) against FedVZ (the same steps, then two perturbed forwards per client and
the SPSA update).

Time: per round, summed over clients: client compute, server compute, and transfer (waiting on the server net of
its compute), from the runs' metrics.

    python bench/fedv_table.py [--rounds 20] [--only "dir0.3 fedv,dir0.3 fedvz lr1e-4"] [--skip-memory]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import resource
import tempfile
import time

import numpy as np
from rich.console import Console

from raysim.config import build_config
from raysim.engine.driver import run

SETTING = {
    "federation": {"clients": 30, "participation": 0.2, "eval_every": 2, "seed": 0},
    "train": {"local_epochs": 1, "batch_size": 16, "optimizer": "adamw", "lr": 5e-4},
    "model": {"backbone": "raysim_vit_tiny_p4_32", "pretrained": True},
    "checkpoint": {"every": 0},
}
SPLITS = {
    "dir0.3": {"dataset": "glyphs62", "partition": "dirichlet", "alpha": 0.3},
    "path10": {"dataset": "glyphs62", "partition": "pathological", "s": 10},
}
METHODS = ("fedv", "fedvz", "fedavg", "ditto", "fedrod", "festa")
VARIANTS = {"fedv lr1e-4": ("fedv", {"lr_server": 1e-4}), "fedvz lr1e-4": ("fedvz", {"lr_server": 1e-4})}
TIMES = ("client_compute_s", "server_compute_s", "transfer_s")


def one_run(method: str, data: dict, rounds: int, tracking: str, options: dict | None = None) -> dict[str, float]:
    split = method in ("fedv", "fedvz", "festa")
    layer = {method: {"fedround": max(1, rounds // 4), **(options or {})}} if split else {}
    config = build_config(
        method,
        [
            SETTING,
            {"federation": {"rounds": rounds}, "data": data},
            layer,
            {"tracking": {"tracking_uri": tracking, "experiment": "fedv-bench"}},
        ],
    )
    start = time.perf_counter()
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))
    s = result.summary
    row = {
        "local": s["local_acc"]["mean"],
        "global": s["global_acc"]["mean"],
        "min": (time.perf_counter() - start) / 60,
    }
    for key in TIMES:
        values = [h[key] for h in result.history if key in h]
        row[key] = float(np.mean(values)) if values else float("nan")
    row["MiB/round"] = float(np.mean([h["bytes_up"] + h["bytes_down"] for h in result.history])) / 2**20
    return row


def server_peak(variant: str, queue) -> None:
    """One round of server work on a DeiT-S encoder in this (fresh) process; puts the peak resident MB with the
    encoder built, after the clients' steps and after the update."""
    import timm
    import torch

    import raysim.models  # noqa: F401 - the torchvision shim before timm
    from raysim.algorithms import _split as split

    torch.manual_seed(0)
    vit = timm.create_model("deit_small_patch16_224", pretrained=False)
    server = split.EncoderServer(vit.blocks)
    del vit
    baseline = peak_mb()
    clients, inputs = range(4), {}
    for client in clients:
        for step in range(3):
            inputs[client] = h = torch.randn(8, 197, 384)
            out, _ = server.forward((client, step), h)
            server.backward((client, step), torch.randn_like(out), client if step == 2 else None)
    steps = peak_mb()
    if variant == "fedv":
        server.step_gradient(list(clients), lr=1e-6)
    else:
        for client in clients:
            server.perturbed(inputs[client], seed=client, eps=1e-4)
        server.step_spsa([(c, 0.1) for c in clients], lr=1e-6)
    queue.put((baseline, steps, peak_mb()))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_rows() -> dict[str, tuple[float, float]]:
    context = multiprocessing.get_context("spawn")
    out = {}
    for variant in ("fedv", "fedvz"):
        queue = context.Queue()
        process = context.Process(target=server_peak, args=(variant, queue))
        process.start()
        out[variant] = queue.get()
        process.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--only", help="comma-separated row names such as 'dir0.3 fedv' (default: all)")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    if not args.skip_memory:
        for variant, (baseline, steps, peak) in memory_rows().items():
            print(
                f"server memory {variant}: {baseline:.0f} MB with the encoder, peak {steps:.0f} MB over the local "
                f"steps, {peak:.0f} MB after the server update (+{peak - steps:.0f} MB for the update)",
                flush=True,
            )
    names = [f"{split} {method}" for split in SPLITS for method in (*METHODS, *VARIANTS)]
    names = [n for n in names if not args.only or n in args.only.split(",")]
    columns = ("local", "global", *TIMES, "MiB/round", "min")
    print(
        f"glyphs62, 30 clients (6 per round), {args.rounds} rounds, seed 0; accuracies: mean of the last 10 "
        f"evaluations; times: seconds per round summed over clients"
    )
    print(f"{'run':22}" + "".join(f"{c:>18}" for c in columns))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            split, variant = name.split(" ", 1)
            method, options = VARIANTS.get(variant, (variant, {}))
            row = one_run(method, SPLITS[split], args.rounds, f"sqlite:///{tmp}/mlflow.db", options)
            print(f"{name:22}" + "".join(f"{row[c]:18.2f}" for c in columns), flush=True)


if __name__ == "__main__":
    main()
