"""Membership inference against the global model and the clients' personalised ones, over seeds.

Each method runs on ``--preset`` (default ``offline-dir0.3``, FedV's setting, where Ditto and FedRoD are baselines) for
``--rounds`` rounds on the sequential backend, tracked in ``--store``; then the loss-threshold attack (``raysim attack
membership``, Yeom et al., CSF 2018) scores the clients: their training rows are the members, their test rows the
non-members, under the final global model and, for a personalised method, under each client's own model (``--model
personal``: the method's ``eval_params`` of the client's state in the run's last checkpoint). A personalised
method's clients are those that trained (they hold a state), for both models; another method's are those whose
updates the server used (the run's ``participation.safetensors``). Prints the
ROC AUC and the TPR at 1% FPR per seed, their means with 95% intervals, and the paired differences (personal − global
within a method; each method's global − FedAvg's), with the project's verdict rules (raysim.tracking.statistics).

With ``--shadows K`` (``raysim attack membership --shadows K``), the global model is also attacked on half of the
clients the server heard (drawn from the run seed) by the loss threshold and by offline LiRA (Carlini et al., S&P 2022)
with K shadow runs that hold those clients out, and LiRA − loss threshold is paired on those rows.

``--memorising`` runs, in place of ``--preset``, a setting whose global model memorises its rows, to check the attacks
where they must find something (LiRA's claim is a higher TPR at a low FPR than the loss threshold's, Carlini et al.,
Fig. 1): the first 600 of scikit-learn's digits as a parquet file in ``--store`` (every third row a test row), 20
clients, 10 a round, 10 local epochs of AdamW, FedAvg's full fine-tuning of the nano ViT from random initialisation.

    python bench/membership.py                                   # fedavg, ditto, fedrod; seeds 0,1,2; 20 rounds
    python bench/membership.py --methods fedavg,ditto --seeds 0,1,2,3,4 --rounds 40
    python bench/membership.py --methods fedavg --shadows 4
    python bench/membership.py --methods fedavg --shadows 4 --memorising --rounds 30
"""

from __future__ import annotations

import argparse
import io
import time
from pathlib import Path

MEMORISING = {
    "federation": {"clients": 20, "participation": 0.5, "eval_every": 5},
    "data": {"dataset": "parquet", "partition": "iid", "image_size": 16},
    "train": {"local_epochs": 10, "optimizer": "adamw", "lr": 1e-3, "batch_size": 16},
    "model": {"backbone": "raysim_vit_nano_p4_16", "pretrained": False},
}
PAIRED_WITH = {"personal": "global", "LiRA, half": "loss, half"}  # the model a row's difference is taken against


def memorising_layer(store: Path) -> dict:
    """:data:`MEMORISING` on ``store``'s copy of the first 600 of scikit-learn's digits (written once)."""
    import numpy as np
    import pyarrow.parquet as pq
    from sklearn.datasets import load_digits

    from raysim.data.parquet import png_table

    path = store / "digits600.parquet"
    if not path.exists():
        digits = load_digits()
        grey = (digits.images[:600] * 255 / 16).astype(np.uint8)
        split = np.where(np.arange(600) % 3 == 0, "test", "train")
        pq.write_table(png_table(np.repeat(grey[..., None], 3, axis=-1), digits.target[:600], split), path)
    return {**MEMORISING, "data": {**MEMORISING["data"], "data_dir": str(path)}}


def attacked(
    method: str, seed: int, preset: str | dict, rounds: int, store: Path, shadows: int
) -> dict[str, tuple[float, float]]:
    """Run ``method`` with ``seed`` and attack it: {"global" | "personal" | "loss, half" | "LiRA, half": (AUC, TPR at
    1% FPR)}. ``preset``: a preset's name or path, or a config layer."""
    from rich.console import Console

    from raysim.attacks.membership_attack import lira, membership
    from raysim.attacks.recorded import client_states, contributors, final_state, personal_models, recorded_config
    from raysim.attacks.shadows import attacked_half
    from raysim.config import build_config, load_preset, preset_for_method
    from raysim.core.protocol import Personalised
    from raysim.core.registry import get_method
    from raysim.engine.driver import run
    from raysim.engine.setup import initial_state, prepare_shards, resolved

    uri = f"sqlite:///{store / 'mlflow.db'}"
    layers = [
        preset_for_method(preset if isinstance(preset, dict) else load_preset(preset), method),
        {
            "federation": {"seed": seed, "rounds": rounds},
            "resources": {"backend": "sequential"},
            "tracking": {"tracking_uri": uri, "experiment": "membership"},
        },
    ]
    start = time.perf_counter()
    result = run(build_config(method, layers), show_progress=False, console=Console(file=io.StringIO()))
    config = recorded_config(uri, result.run_id)
    state = final_state(uri, result.run_id)
    states, params = personal_models(config, state, client_states(uri, result.run_id, config)), state.params
    config, _, _, shards = initial_state(resolved(config), prepare_shards(config))
    personalised = issubclass(get_method(method).cls, Personalised)
    clients = sorted(states) if personalised else contributors(uri, result.run_id)  # a state: the client trained
    found = {"global": membership(config, params, shards, clients)}
    if personalised:
        found["personal"] = membership(config, params, shards, clients, states)
    if shadows:
        half = attacked_half(seed, contributors(uri, result.run_id))
        found["loss, half"] = membership(config, params, shards, half)
        found["LiRA, half"] = lira(config, params, shards, half, shadows)
    out = {model: (m.roc.auc, m.roc.tpr_at_low_fpr) for model, m in found.items()}
    print(
        f"{method:<7} seed {seed}: "
        + ", ".join(f"{model} AUC {auc:.3f} TPR@1% {tpr:.3f}" for model, (auc, tpr) in out.items())
        + f" ({len(clients)} clients, {found['global'].members} members, {found['global'].non_members} non-members;"
        f" {time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="fedavg,ditto,fedrod")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--preset", default="offline-dir0.3")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--store", default="bench-membership", help="Folder of the runs' MLflow store.")
    parser.add_argument("--shadows", type=int, default=0, help="Shadow runs for offline LiRA (0: none).")
    parser.add_argument("--memorising", action="store_true", help="A setting whose global model memorises (above).")
    args = parser.parse_args()

    from raysim.tracking.statistics import interval, paired

    store = Path(args.store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    preset = memorising_layer(store) if args.memorising else args.preset
    results = {m: {s: attacked(m, s, preset, args.rounds, store, args.shadows) for s in seeds} for m in methods}

    def by_seed(method: str, model: str, k: int) -> dict[int, float]:
        return {s: r[model][k] for s, r in results[method].items() if model in r}

    print("\n| method, model | AUC | TPR at 1% FPR | paired with | AUC difference | TPR difference |")
    print("|---|---|---|---|---|---|")
    for method in methods:
        for model in ("global", "personal", "loss, half", "LiRA, half"):
            auc = by_seed(method, model, 0)
            if not auc:
                continue
            mean, half = interval(list(auc.values()))
            tpr_mean, tpr_half = interval(list(by_seed(method, model, 1).values()))
            other = (PAIRED_WITH[model], method) if model in PAIRED_WITH else ("global", methods[0])
            diffs = ["", ""]
            if other != (model, method):
                for k in (0, 1):
                    d, h, agree, n = paired(by_seed(other[1], other[0], k), by_seed(method, model, k))
                    diffs[k] = f"{d:+.3f} ± {h:.3f} ({agree} of {n} seeds)"
            paired_with = f"{other[1]}, {other[0]}" if diffs[0] else ""
            print(
                f"| {method}, {model} | {mean:.3f} ± {half:.3f} | {tpr_mean:.3f} ± {tpr_half:.3f} | {paired_with} | "
                f"{diffs[0]} | {diffs[1]} |"
            )


if __name__ == "__main__":
    main()
