"""Validate the attack harness against the papers' qualitative results on the offline 32 px default.

The offline default (glyphs62 at 32 px, the shipped raysim ViT-Tiny) with every client holding one training row
(6,510 clients, IID), SGD and one round: each client's update is one local step on a batch of 1, the setting of
Inverting Gradients' Section 4 (Geiping et al., NeurIPS 2020). The run is replayed and the first ``--trials``
messages the server received are attacked: by Inverting Gradients (the default settings of ``raysim attack
inverting``) for every method, and by APRIL's closed form (Lu et al., CVPR 2022) where the message carries the
embeddings' gradients (FedAvg). Prints, per trial, the label iDLG recovered, PSNR, SSIM, the attack's seconds and
its final cosine distance beside the one at the client's true input (for Inverting Gradients also the PSNR with
the reconstruction's patches moved to the places of the row's closest ones: a diagnostic that reads the row), then
per attack the mean of the seeds' mean PSNRs with its 95% t interval and how many trials passed 20 dB (the target
for Inverting Gradients: at least half), and saves each trial's picture in ``--out``.

Split learning (FedV, FedVZ, FESTA) is attacked by smashed-data inversion instead (``raysim attack smashed``), in
round 1 (each client's own random head) and round 2 (every client starts from the heads averaged after round 1),
with the round's broadcast head as the attacker's prior; FedV's and FedVZ's runs of a seed sample the same clients.
``--inversion`` picks the search (He et al.'s white-box attack), the inverse network trained on other clients' test
rows (their black-box attack), or both; the labels of every local step are read off the gradients the client's tail
returned (``raysim attack label-leakage``), through the round's broadcast tail.

``--lenet`` validates Inverting Gradients itself against the paper's kind of network, in place of the ViT's messages:
the same rows and labels, the gradient of DLG's LeNet (Zhu et al., NeurIPS 2019; random initialisation, from the run
seed and the client) at them, the same search. ``--refine N`` follows each search with N L-BFGS iterations in
float64 on the gradient match alone.

    python bench/attacks.py                                   # FedAvg and FedVPT, seed 0, 4 trials each
    python bench/attacks.py --methods fedavg --seeds 0,1,2 --trials 2 --iterations 1500
    python bench/attacks.py --methods fedv,fedvz --seeds 0,1,2 --trials 4
    python bench/attacks.py --methods fedv --seeds 0,1,2 --trials 4 --inversion search,network
    python bench/attacks.py --methods fedv --seeds 0,1,2 --trials 4 --set federation.clients=651 \
        --set federation.participation=0.02     # 10 rows a client: the labels of 10 steps of a drifting tail
    python bench/attacks.py --methods fedavg --seeds 0,1,2 --trials 4 --lenet
    python bench/attacks.py --methods fedavg --seeds 0,1,2 --trials 4 --lenet --refine 500
    python bench/attacks.py --methods fedavg --seeds 0,1,2 --trials 2 --set train.local_epochs=2   # two local steps
    python bench/attacks.py --methods fedavg --seeds 0,1,2 --skip-inverting --set privacy.mode=record \
        --set privacy.noise_multiplier=1.0 --set privacy.clip=1.0 --set privacy.delta=1e-5   # APRIL against DP-SGD
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path

ONE_ROW_CLIENTS = {
    "resources": {"backend": "sequential"},
    "federation": {"clients": 6510, "participation": 0.002, "rounds": 1},
    "data": {"partition": "iid"},
    "train": {"batch_size": 1, "optimizer": "sgd"},
}
TARGET_DB = 20.0


def loss_at_truth(captured, client: int) -> float:
    """Inverting Gradients' objective at the client's true rows and labels (for several local steps, the simulated
    training's, rows in the client's order when an epoch is one batch): about 0 when the attack models what the
    client did (the objective is right; what remains is the search)."""
    import torch

    from raysim.attacks.harness import attacker_model, update_objective
    from raysim.core.training import model_inputs
    from raysim.engine.cohort import unfused_attention

    update, broadcast, config = captured.updates[client], captured.broadcast, captured.config
    model, _ = attacker_model(config, captured.shards.info.num_classes, broadcast.params)
    _, _, loss = update_objective(update, broadcast, config, model)
    data = captured.shards.train(client)
    x, y = model_inputs(model, data.images, torch.device("cpu")), torch.as_tensor(data.labels).long()
    with unfused_attention(model.train()):
        return float(loss(x, y, 0.0).detach())


def lenet(mean, std, classes: int, seed: int):
    """DLG's LeNet for 32 px inputs (Zhu, Liu, Han, "Deep leakage from gradients", NeurIPS 2019): three 5x5
    convolutions with sigmoids and a linear classifier, initialised from ``seed``; ``input_spec`` as raysim's models."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 12, 5, padding=2, stride=2),
        nn.Sigmoid(),
        nn.Conv2d(12, 12, 5, padding=2, stride=2),
        nn.Sigmoid(),
        nn.Conv2d(12, 12, 5, padding=2, stride=1),
        nn.Sigmoid(),
        nn.Flatten(),
        nn.Linear(768, classes),
    )
    model.input_spec = (32, mean, std)
    return model


def lenet_trial(captured, client: int, settings, seed: int):
    """Inverting Gradients against LeNet's gradient at ``client``'s rows: (PSNR, SSIM, seconds, final loss, the row
    and its reconstruction as pixels)."""
    import torch
    import torch.nn.functional as F

    from raysim.attacks import scores
    from raysim.attacks.harness import attacker_model
    from raysim.attacks.inverting import invert
    from raysim.core.training import model_inputs

    vit, _ = attacker_model(captured.config, captured.shards.info.num_classes, captured.broadcast.params)
    _, mean, std = vit.input_spec
    data = captured.shards.train(client)
    x, y = model_inputs(vit, data.images, torch.device("cpu")), torch.as_tensor(data.labels).long()
    model = lenet(mean, std, captured.shards.info.num_classes, seed * 100_003 + client)
    names = [name for name, _ in model.named_parameters()]
    gradient = dict(zip(names, torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))))
    inversion = invert(model, gradient, y, scores.model_box(mean, std), settings)
    original, image = scores.to_pixels(x, mean, std)[0], scores.to_pixels(inversion.inputs, mean, std)[0]
    psnr, ssim = scores.psnr(original, image), scores.ssim(original, image)
    return psnr, ssim, inversion.seconds, inversion.loss, original, image


def smashed(captured, client: int, settings):
    """Smashed-data inversion of ``client``'s first local step through the round's broadcast head."""
    from raysim.attacks.split_learning import reconstruct_smashed

    return reconstruct_smashed(captured, client, 1, "broadcast", settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="fedavg,fedvpt")
    parser.add_argument("--seeds", default="0", help="Run seeds (comma-separated): partition, sampling, head.")
    parser.add_argument("--trials", type=int, default=4, help="Messages attacked per method and seed.")
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--tv", type=float, default=1e-2)
    parser.add_argument("--refine", type=int, default=0, help="L-BFGS iterations in float64 after the search.")
    parser.add_argument("--out", default="bench-attacks", help="Folder for the pictures.")
    parser.add_argument("--lenet", action="store_true", help="Invert LeNet's gradient at the rows, not the ViT's.")
    parser.add_argument(
        "--inversion", default="search", help="Split learning: search, network or both (comma-separated)."
    )
    parser.add_argument("--skip-inverting", action="store_true", help="APRIL alone on FedAvg (e.g. under DP).")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="A setting on top of the one-row clients' (repeatable), e.g. privacy.mode=record.",
    )
    args = parser.parse_args()

    import numpy as np
    import torch

    from raysim.attacks import scores
    from raysim.attacks.capture import capture
    from raysim.attacks.figures import reconstruction_grid
    from raysim.attacks.harness import attacker_model, reconstruct, reconstruct_analytic
    from raysim.attacks.inverse_network import InverseSettings
    from raysim.attacks.inverting import InvertingSettings
    from raysim.attacks.smashed import SmashedSettings
    from raysim.attacks.split_learning import read_labels
    from raysim.config import build_config
    from raysim.config.build import parse_override
    from raysim.core.registry import get_method
    from raysim.engine.setup import resolved
    from raysim.tracking.statistics import interval

    extra: dict = {}
    for text in args.overrides:
        section, key, value = parse_override(text)
        extra.setdefault(section, {})[key] = value
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = InvertingSettings(iterations=args.iterations, tv=args.tv, refine=args.refine)
    inversions = {"search": SmashedSettings(), "network": InverseSettings()}
    if set(args.inversion.split(",")) - set(inversions):
        parser.error(f"--inversion takes {' and '.join(inversions)}, comma-separated")
    passed, psnrs, labels = {}, {}, {}
    print(f"torch threads {torch.get_num_threads()}; Inverting Gradients: {settings}")
    print("method  seed  client  attack     label (true)  PSNR dB  SSIM    seconds  loss (at the true input)")
    for method in args.methods.split(","):
        split = get_method(method).split_learning
        for seed in [int(s) for s in args.seeds.split(",")]:
            config = resolved(
                build_config(
                    method, [ONE_ROW_CLIENTS, extra, {"federation": {"seed": seed, "rounds": 2 if split else 1}}]
                )
            )
            for round_number in (1, 2) if split else (1,):
                start = time.perf_counter()
                captured = capture(config, round_number)
                print(f"{method}: captured round {round_number} of seed {seed} in {time.perf_counter() - start:.0f} s")
                lenet_rows: list[tuple] = []
                model, _ = attacker_model(config, captured.shards.info.num_classes, None)
                patch = model.vit.patch_embed.patch_size[0]
                for client in sorted(captured.updates)[: args.trials]:
                    if split:
                        attacks = [
                            (f"{inversion} r{round_number}", partial(smashed, settings=inversions[inversion]))
                            for inversion in args.inversion.split(",")
                        ]
                        truth = float("nan")
                    elif args.lenet:
                        attacks, truth = [], float("nan")
                    else:
                        inverting = ("inverting", lambda c, k: reconstruct(c, k, settings))
                        attacks = [] if args.skip_inverting else [inverting]
                        if method == "fedavg" and config.train.local_epochs == 1:  # april: one step's gradient
                            attacks.append(("april", reconstruct_analytic))
                        truth = loss_at_truth(captured, client)
                    for name, attack in attacks:
                        result = attack(captured, client)
                        psnr, ssim = result.psnr[0], result.ssim[0]
                        label = f"{result.labels[0]:>5} ({result.true_labels[0]:>2})" if result.labels else " " * 10
                        print(
                            f"{method:<7} {seed:>4}  {client:>6}  {name:<10} {label}  {psnr:7.2f}  {ssim:6.3f}  "
                            f"{result.seconds:7.1f}  {result.loss:.4f} ({truth:.1e})",
                            flush=True,
                        )
                        picture = out / f"{method}-s{seed}-c{client}-{name.replace(' ', '-')}.png"
                        reconstruction_grid(result.originals, result.images, [f"{name}, {psnr:.1f} dB"], picture)
                        psnrs.setdefault((method, name), {}).setdefault(seed, []).append(psnr)
                        passed.setdefault((method, name), []).append(psnr > TARGET_DB)
                        if name == "inverting":  # the diagnostic: the same patches, put where the row's are
                            placed = scores.patches_placed(result.originals[0], result.images[0], patch)
                            placed_psnr = scores.psnr(result.originals[0], placed)
                            print(f"{method:<7} {seed:>4}  {client:>6}  {'placed':<10} {'':10}  {placed_psnr:7.2f}")
                            reconstruction_grid(
                                result.originals[:1],
                                placed[None],
                                [f"patches placed as the row's, {placed_psnr:.1f} dB"],
                                out / f"{method}-s{seed}-c{client}-placed.png",
                            )
                            name = "inverting, patches placed as the row's"
                            psnrs.setdefault((method, name), {}).setdefault(seed, []).append(placed_psnr)
                            passed.setdefault((method, name), []).append(placed_psnr > TARGET_DB)
                    if split:  # the labels of every step, from the gradients the tail returned
                        first, every = (read_labels(captured, client, steps, "broadcast") for steps in ([1], None))
                        name = f"labels r{round_number}"
                        print(
                            f"{method:<7} {seed:>4}  {client:>6}  {name:<10} {first.labels[0]:>5} "
                            f"({first.true_labels[0]:>2})  {'':7}  {'':6}  {first.seconds:7.1f}  "
                            f"{first.residual:.1e}; {every.accuracy:.0%} of the rows of its {len(every.steps)} steps",
                            flush=True,
                        )
                        labels.setdefault((method, name), []).append((first.accuracy, every.accuracy))
                    if args.lenet and not split:  # the rows and labels only: the gradient is LeNet's
                        psnr, ssim, seconds, loss, original, image = lenet_trial(captured, client, settings, seed)
                        lenet_rows.append((original, image, f"{psnr:.1f} dB"))
                        print(
                            f"{method:<7} {seed:>4}  {client:>6}  {'lenet':<10} {'':10}  {psnr:7.2f}  {ssim:6.3f}  "
                            f"{seconds:7.1f}  {loss:.4f}",
                            flush=True,
                        )
                        psnrs.setdefault((method, "inverting, LeNet"), {}).setdefault(seed, []).append(psnr)
                        passed.setdefault((method, "inverting, LeNet"), []).append(psnr > TARGET_DB)
                if lenet_rows:  # the seed's rows above LeNet's reconstructions
                    originals, images, captions = zip(*lenet_rows)
                    picture = out / f"{method}-s{seed}-lenet-refine{args.refine}.png"
                    reconstruction_grid(np.stack(originals), np.stack(images), list(captions), picture)
    for (method, name), by_seed in psnrs.items():
        values = [psnr for seed_values in by_seed.values() for psnr in seed_values]
        mean, half = interval([statistics.mean(v) for v in by_seed.values()])
        hits = sum(passed[(method, name)])
        print(
            f"{method} {name}: PSNR mean of the seeds' means {mean:.2f} ± {half:.2f} dB (95% t interval, "
            f"{len(by_seed)} seeds; min {min(values):.2f}, max {max(values):.2f}); above {TARGET_DB:.0f} dB on "
            f"{hits} of {len(values)} trials"
        )
    for (method, name), values in labels.items():
        first, every = (statistics.mean(v) for v in zip(*values))
        print(
            f"{method} {name}: labels recovered at step 1 {first:.0%}, at every step {every:.0%} ({len(values)} trials)"
        )


if __name__ == "__main__":
    main()
