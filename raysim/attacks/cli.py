"""``raysim attack``: attack what the server of a recorded run received, as an MLflow run nested under it.

    raysim attack inverting --run RUN_ID --round 1 --clients 3,7
    raysim attack april --run RUN_ID --round 1 --clients 3,7
    raysim attack smashed --run RUN_ID --round 2 --clients 3,7
    raysim attack membership --run RUN_ID
    raysim attack membership --run RUN_ID --model personal
    raysim attack membership --run RUN_ID --shadows 4
    raysim attack features --run RUN_ID --round 5 --prototype

Imports click and the config only (``raysim --help`` stays free of torch, Ray and MLflow); each command imports the
attack it runs. Bad input is one line and exit code 2 (:class:`~raysim.base.errors.ConfigError`, which the CLI's
group prints).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from statistics import mean

import click

from raysim.attacks.cli_options import ROUND, RUN, TRACKING_URI, replayed
from raysim.attacks.features_cli import features
from raysim.attacks.membership_cli import membership
from raysim.base.errors import ConfigError


@click.group(context_settings={"max_content_width": 100})
def attack():
    """Attack what the server of a recorded run received (docs/how-to/attacks.md).

    \b
    raysim attack inverting --run RUN_ID --round 1 --clients 3   reconstruct a client's input from its update
    raysim attack april --run RUN_ID --round 1 --clients 3       the same in closed form (full fine-tuning)
    raysim attack smashed --run RUN_ID --round 2 --clients 3     a split-learning client's input from its features
    raysim attack membership --run RUN_ID                        membership inference on the final global model
    raysim attack membership --run RUN_ID --model personal       ... on each client's own model (ditto, fedrod)
    raysim attack membership --run RUN_ID --shadows 4            ... and offline LiRA, with 4 shadow runs
    raysim attack features --run RUN_ID --round 5                what FedGCR's feature means reveal
    raysim attack features --run RUN_ID --round 5 --prototype    ... and the image each one is the feature of
    """


CLIENTS = click.option(
    "--clients",
    metavar="IDS",
    help="Comma-separated clients whose updates to attack (default: the round's first client the server kept).",
)


def refuse_unless_update_inversion(config) -> None:
    """What inverting and april need of the run: updates of SGD steps (april: of one) of a model whose forward they
    model."""
    from raysim.attacks.harness import refuse_cached_row_features
    from raysim.attacks.observed import refuse_unless_sgd_updates

    refuse_unless_sgd_updates(config)
    refuse_cached_row_features(config)


def reconstruction_attack(
    name: str, run_id: str, round_number: int, clients: str | None, tracking_uri, attack_one, params: dict, refuse
) -> None:
    """Replay run ``run_id`` (:func:`replayed`, after ``refuse``) to round ``round_number`` and reconstruct each chosen
    client's message with ``attack_one(captured, client)``; then an MLflow run ``name`` nested under ``run_id`` gets,
    per client (as the step), PSNR, SSIM, whether the labels were recovered (for an attack that recovers them) and
    the seconds, and the picture (an attack refused for one client leaves no run)."""
    from raysim.attacks.attack_run import attack_run
    from raysim.attacks.figures import reconstruction_grid

    uri, chosen, captured = replayed(run_id, round_number, clients, tracking_uri, refuse)
    targets = chosen or [min(captured.updates)]
    results = []
    for client in targets:
        result = attack_one(captured, client)
        results.append(result)
        labels = f", labels {result.labels} (true {result.true_labels})" if result.labels else ""
        click.echo(
            f"client {client}: PSNR {mean(result.psnr):.1f} dB, SSIM {mean(result.ssim):.3f}{labels}, "
            f"{result.seconds:.0f} s"
        )
    given = {"round": round_number, "clients": ",".join(map(str, targets)), **params}
    with attack_run(uri, run_id, name, given) as tracker:
        for result in results:
            metrics = {"psnr": mean(result.psnr), "ssim": mean(result.ssim), "seconds": result.seconds}
            if result.labels:
                metrics["labels_recovered"] = float(sorted(result.labels) == sorted(result.true_labels))
            tracker.log_metrics(metrics, step=result.client)
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / f"client-{result.client}.png"
                labels = result.labels or [None] * len(result.psnr)
                captions = [
                    (f"label {y}, " if y is not None else "") + f"{p:.1f} dB" for y, p in zip(labels, result.psnr)
                ]
                reconstruction_grid(result.originals, result.images, captions, path)
                tracker.log_artifact(path)
        click.echo(f"attack run {tracker.run_id}, nested under {run_id}")


@attack.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@click.option("--iterations", type=int, default=1500, show_default=True, help="Adam's steps on the input.")
@click.option("--tv", type=float, default=1e-2, show_default=True, help="Weight of the total-variation prior.")
@click.option("--lr", type=float, default=0.1, show_default=True, help="Adam's step on the input.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the initial noise.")
@TRACKING_URI
def inverting(run_id, round_number, clients, iterations, tv, lr, seed, tracking_uri):
    """Inverting Gradients (Geiping et al., NeurIPS 2020) against clients' updates of SGD: labels recovered from the
    head's bias, inputs reconstructed (for several local steps, by training as the client did); PSNR and SSIM logged
    with the picture."""
    from raysim.attacks.harness import reconstruct
    from raysim.attacks.inverting import InvertingSettings

    if iterations < 1 or tv < 0 or lr <= 0:
        raise ConfigError("--iterations must be at least 1, --tv at least 0 and --lr above 0")
    settings = InvertingSettings(iterations, lr, tv, seed)
    params = {"iterations": iterations, "tv": tv, "lr": lr, "seed": seed}
    attack_one = lambda captured, client: reconstruct(captured, client, settings)
    reconstruction_attack(
        "inverting", run_id, round_number, clients, tracking_uri, attack_one, params, refuse_unless_update_inversion
    )


@attack.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@TRACKING_URI
def april(run_id, round_number, clients, tracking_uri):
    """APRIL's closed form (Lu et al., CVPR 2022) against clients' updates of one SGD step on one row with the
    patch and position embeddings trained (fedavg): the input solved from their gradients, in well under a second."""
    from raysim.attacks.harness import reconstruct_analytic

    reconstruction_attack(
        "april", run_id, round_number, clients, tracking_uri, reconstruct_analytic, {}, refuse_unless_update_inversion
    )


@attack.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@click.option(
    "--step", type=int, default=1, show_default=True, help="The client's local step whose features to invert."
)
@click.option(
    "--prior",
    type=click.Choice(["broadcast", "pretrained"]),
    default="broadcast",
    show_default=True,
    help="The client head the attacker assumes: the round's broadcast one or the backbone's pretrained one.",
)
@click.option("--iterations", type=int, default=500, show_default=True, help="Adam's steps on the input.")
@click.option("--tv", type=float, default=1e-4, show_default=True, help="Weight of the total-variation prior.")
@click.option("--lr", type=float, default=0.1, show_default=True, help="Adam's first step on the input.")
@TRACKING_URI
def smashed(run_id, round_number, clients, step, prior, iterations, tv, lr, tracking_uri):
    """Smashed-data inversion (He et al., ACSAC 2019) against split-learning clients (fedv, fedvz, festa): the input
    whose features through the assumed client head are those the server received at one local step."""
    from raysim.attacks.harness import reconstruct_smashed, refuse_unless_split_learning
    from raysim.attacks.smashed import SmashedSettings

    if iterations < 1 or tv < 0 or lr <= 0 or step < 1:
        raise ConfigError("--iterations and --step must be at least 1, --tv at least 0 and --lr above 0")
    settings = SmashedSettings(iterations, lr, tv)
    params = {"step": step, "prior": prior, "iterations": iterations, "tv": tv, "lr": lr}
    attack_one = lambda captured, client: reconstruct_smashed(captured, client, step, prior, settings)
    reconstruction_attack(
        "smashed", run_id, round_number, clients, tracking_uri, attack_one, params, refuse_unless_split_learning
    )


attack.add_command(membership)
attack.add_command(features)
