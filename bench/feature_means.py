"""What FedGCR's feature means reveal, against a server that received nothing, over seeds.

Each method (default FedGCR and its ablation FedGR, whose h_tilde is the frozen class token's mean) is replayed on
``--preset`` (default ``offline-digit5-dif10``, FedGCR's setting: 22 clients of 5 types, all every round) and every
client's h_tilde of each of ``--rounds`` is read by ``raysim attack features`` (raysim.attacks.feature_means): the
type most common among the ``--k`` public rows nearest to it (the test rows of every other client), against the
other clients' most common type (what a server that received nothing, but knows the population's mix, guesses); the
share of those rows whose label the client holds, against the pool's base rate. With ``--prototype``, also the
type shown by the image reconstructed from each h_tilde (``raysim attack features --prototype``: the type whose mean
public image is nearest to it), against the same guess of nothing. Prints per seed, then the means over seeds with
95% intervals and the paired differences (attack − nothing), with the project's verdict rules
(raysim.tracking.statistics).

    python bench/feature_means.py                                # fedgcr, fedgr; seeds 0,1,2; rounds 1 and 5
    python bench/feature_means.py --methods fedgcr --rounds 1,10 --k 20
    python bench/feature_means.py --methods fedgcr --rounds 5 --prototype
"""

from __future__ import annotations

import argparse
import time
from statistics import mean


def read(method: str, seed: int, preset: str, round_number: int, k: int, prototypes: bool) -> dict[str, float]:
    """Replay ``method`` with ``seed`` to ``round_number`` and read every client's h_tilde of that round."""
    from raysim.attacks.capture import capture
    from raysim.attacks.harness import read_feature_means
    from raysim.config import build_config, load_preset, preset_for_method
    from raysim.engine.setup import resolved

    layers = [
        preset_for_method(load_preset(preset), method),
        {"federation": {"seed": seed}, "resources": {"backend": "sequential"}},
    ]
    start = time.perf_counter()
    captured = capture(resolved(build_config(method, layers)), round_number)
    found = [r.inference for r in read_feature_means(captured, sorted(captured.updates), k)]
    out = {
        "type": mean(float(r.type_recovered) for r in found),
        "type_nothing": mean(float(r.baseline_recovered) for r in found),
        "labels": mean(r.label_precision for r in found),
        "labels_nothing": mean(r.label_base_rate for r in found),
    }
    shown = ""
    if prototypes:
        from raysim.attacks.prototype import prototypes as reconstruct
        from raysim.attacks.smashed import SmashedSettings

        made = reconstruct(captured, sorted(captured.updates), SmashedSettings())
        out["prototype"] = mean(float(p.type_recovered) for p in made)
        out["prototype_nothing"] = out["type_nothing"]
        shown = f", prototype's type {out['prototype']:.3f}"
    print(
        f"{method:<7} seed {seed} round {round_number:>3}: type {out['type']:.3f} (nothing {out['type_nothing']:.3f}),"
        f" label precision {out['labels']:.3f} (base rate {out['labels_nothing']:.3f}){shown}; {len(found)} clients,"
        f" {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="fedgcr,fedgr")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--preset", default="offline-digit5-dif10")
    parser.add_argument("--rounds", default="1,5", help="The rounds whose feature means are read.")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--prototype", action="store_true", help="Also read the type each mean's prototype shows.")
    args = parser.parse_args()

    from raysim.tracking.statistics import interval, paired

    seeds = [int(s) for s in args.seeds.split(",")]
    rounds = [int(r) for r in args.rounds.split(",")]
    results = {
        (m, r): {s: read(m, s, args.preset, r, args.k, args.prototype) for s in seeds}
        for m in args.methods.split(",")
        for r in rounds
    }
    keys = ("type", "labels", "prototype") if args.prototype else ("type", "labels")
    header = "type recovered | sending nothing | difference | label precision | base rate | difference"
    header += " | prototype's type | sending nothing | difference" if args.prototype else ""
    print(f"\n| method | round | {header} |")
    print("|---|---|" + "---|" * 3 * len(keys))
    for (method, round_number), by_seed in results.items():
        cells = []
        for key in keys:
            attack = {s: v[key] for s, v in by_seed.items()}
            nothing = {s: v[f"{key}_nothing"] for s, v in by_seed.items()}
            d, h, agree, n = paired(nothing, attack)
            (a, ah), (b, bh) = interval(list(attack.values())), interval(list(nothing.values()))
            cells += [f"{a:.3f} ± {ah:.3f}", f"{b:.3f} ± {bh:.3f}", f"{d:+.3f} ± {h:.3f} ({agree} of {n} seeds)"]
        print(f"| {method} | {round_number} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
