"""``raysim attack``: attack what the server of a recorded run received, as an MLflow run nested under it.

    raysim attack inverting --run RUN_ID --round 1 --clients 3,7
    raysim attack april --run RUN_ID --round 1 --clients 3,7
    raysim attack smashed --run RUN_ID --round 2 --clients 3,7
    raysim attack smashed --run RUN_ID --round 2 --clients 3,7 --inversion network
    raysim attack label-leakage --run RUN_ID --round 2 --clients 3,7
    raysim attack membership --run RUN_ID
    raysim attack membership --run RUN_ID --model personal
    raysim attack membership --run RUN_ID --shadows 4
    raysim attack features --run RUN_ID --round 5 --prototype

Imports click and the config only (``raysim --help`` stays free of torch, Ray and MLflow); each command imports the
attack it runs. Bad input is one line and exit code 2 (:class:`~raysim.base.errors.ConfigError` or click's own
error, which the CLI's group prints).
"""

from __future__ import annotations

import click

from raysim.attacks.cli_options import (
    AT_LEAST_ONE,
    AT_LEAST_ZERO,
    CLIENTS,
    NON_NEGATIVE,
    POSITIVE,
    ROUND,
    RUN,
    SEED,
    TRACKING_URI,
    reconstruction_attack,
)
from raysim.attacks.features_cli import features
from raysim.attacks.membership_cli import membership
from raysim.attacks.split_cli import label_leakage, smashed
from raysim.base.command_group import CommandGroup


@click.group(cls=CommandGroup, context_settings={"max_content_width": 100})
@click.pass_context
def attack(ctx):
    """Attack what the server of a recorded run received (docs/how-to/attacks.md).

    \b
    raysim attack inverting --run RUN_ID --round 1 --clients 3      reconstruct a client's input from its update
    raysim attack april --run RUN_ID --round 1 --clients 3          the same in closed form (full fine-tuning)
    raysim attack smashed --run RUN_ID --round 2 --clients 3        a split-learning client's input from its features
    raysim attack label-leakage --run RUN_ID --round 2 --clients 3  its labels from the gradients its tail returns
    raysim attack membership --run RUN_ID                           membership inference on the final global model
    raysim attack membership --run RUN_ID --model personal          ... on each client's own model (ditto, fedrod)
    raysim attack membership --run RUN_ID --shadows 4               ... and offline LiRA, with 4 shadow runs
    raysim attack features --run RUN_ID --round 5                   what FedGCR's feature means reveal
    raysim attack features --run RUN_ID --round 5 --prototype       ... and the image each one is the feature of

    On a terminal, a bar on stderr shows the replay's rounds and each search's iterations.
    """
    from raysim.attacks.progress import showing_progress

    ctx.with_resource(showing_progress())


def refuse_unless_update_inversion(config, attack: str = "inverting") -> None:
    """What inverting and april need of the run: updates of SGD steps (april: of one) of a model whose forward they
    model."""
    from raysim.attacks.harness import refuse_cached_row_features, refuse_unmodelled_training
    from raysim.attacks.observed import refuse_unless_sgd_updates

    refuse_unless_sgd_updates(config, attack)
    refuse_cached_row_features(config)
    refuse_unmodelled_training(config)


def refuse_unless_embeddings_trained(config) -> None:
    """What april needs besides :func:`refuse_unless_update_inversion`'s: clients that train the patch and position
    embeddings (full fine-tuning), read off the method's model before any replay."""
    from raysim.attacks.analytic import refuse_without_embeddings
    from raysim.attacks.harness import attacker_model

    refuse_unless_update_inversion(config, "april")
    model, _ = attacker_model(config, 2, None)  # what trains does not depend on the number of classes
    refuse_without_embeddings(model.trainable_names(), f"{config.method}'s clients train")


@attack.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@click.option("--iterations", type=AT_LEAST_ONE, default=1500, show_default=True, help="Adam's steps on the input.")
@click.option("--tv", type=NON_NEGATIVE, default=1e-2, show_default=True, help="Weight of the total-variation prior.")
@click.option("--lr", type=POSITIVE, default=0.1, show_default=True, help="Adam's step on the input.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the initial noise.")
@click.option(
    "--refine",
    type=AT_LEAST_ZERO,
    default=0,
    show_default=True,
    help="L-BFGS iterations in float64 after the search (0: none).",
)
@TRACKING_URI
def inverting(run_id, round_number, clients, iterations, tv, lr, seed, refine, tracking_uri):
    """Inverting Gradients (Geiping et al., NeurIPS 2020) against clients' updates of SGD: labels recovered from the
    head's bias, inputs reconstructed (for several local steps, by training as the client did); PSNR and SSIM logged
    with the picture."""
    from raysim.attacks.harness import reconstruct
    from raysim.attacks.inverting import InvertingSettings

    settings = InvertingSettings(iterations, lr, tv, seed, refine)
    params = {"iterations": iterations, "tv": tv, "lr": lr, "seed": seed, "refine": refine}
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
        "april", run_id, round_number, clients, tracking_uri, reconstruct_analytic, {}, refuse_unless_embeddings_trained
    )


attack.add_command(smashed)
attack.add_command(label_leakage)
attack.add_command(membership)
attack.add_command(features)
