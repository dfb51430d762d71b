"""``raysim attack smashed`` and ``raysim attack label-leakage``: the attacks on what a split-learning server (FedV,
FedVZ, FESTA) receives at its clients' local steps."""

from __future__ import annotations

import click

from raysim.attacks.cli_options import (
    AT_LEAST_ONE,
    CLIENTS,
    NON_NEGATIVE,
    POSITIVE,
    ROUND,
    RUN,
    TRACKING_URI,
    reconstruction_attack,
    refuse_unused,
    replayed,
)
from raysim.base.errors import ConfigError

PRIOR = click.option(
    "--prior",
    type=click.Choice(["broadcast", "pretrained"]),
    default="broadcast",
    show_default=True,
    help="The client head and tail the attacker assumes: the round's broadcast ones or the backbone's pretrained ones.",
)


@click.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@click.option("--step", type=AT_LEAST_ONE, default=1, show_default=True, help="The client's local step to invert.")
@PRIOR
@click.option(
    "--inversion",
    type=click.Choice(["search", "network"]),
    default="search",
    show_default=True,
    help="Search the input through the head (white-box) or decode with a network trained on public rows (black-box).",
)
@click.option(
    "--iterations", type=AT_LEAST_ONE, default=500, show_default=True, help="search: Adam's steps on the input."
)
@click.option(
    "--tv", type=NON_NEGATIVE, default=1e-4, show_default=True, help="search: weight of the total-variation prior."
)
@click.option("--lr", type=POSITIVE, default=0.1, show_default=True, help="search: Adam's first step on the input.")
@click.option(
    "--epochs", type=AT_LEAST_ONE, default=30, show_default=True, help="network: epochs over the public rows."
)
@click.option(
    "--public-rows",
    type=AT_LEAST_ONE,
    default=4096,
    show_default=True,
    help="network: the most public rows it trains on.",
)
@TRACKING_URI
def smashed(
    run_id, round_number, clients, step, prior, inversion, iterations, tv, lr, epochs, public_rows, tracking_uri
):
    """Smashed-data inversion (He et al., ACSAC 2019) against split-learning clients (fedv, fedvz, festa): the input
    whose features through the assumed client head are those the server received at one local step, searched for or
    decoded by an inverse network trained on other clients' test rows as public data."""
    from raysim.attacks.inverse_network import InverseSettings
    from raysim.attacks.smashed import SmashedSettings
    from raysim.attacks.split_learning import reconstruct_smashed, refuse_unless_split_learning

    params = {"step": step, "prior": prior, "inversion": inversion}
    if inversion == "search":
        refuse_unused(("epochs", "public_rows"), "under --inversion search (they train the network); drop them")
        settings = SmashedSettings(iterations, lr, tv)
        params.update(iterations=iterations, tv=tv, lr=lr)
    else:
        refuse_unused(("iterations", "tv", "lr"), "under --inversion network (they set the search); drop them")
        settings = InverseSettings(public_rows=public_rows, epochs=epochs)
        params.update(epochs=epochs, public_rows=public_rows)
    attack_one = lambda captured, client: reconstruct_smashed(captured, client, step, prior, settings)
    reconstruction_attack(
        "smashed", run_id, round_number, clients, tracking_uri, attack_one, params, refuse_unless_split_learning
    )


@click.command("label-leakage", context_settings={"max_content_width": 100})
@RUN
@ROUND
@CLIENTS
@click.option(
    "--step", "step_text", default="1", show_default=True, help="The client's local step to attack, or all of them."
)
@PRIOR
@TRACKING_URI
def label_leakage(run_id, round_number, clients, step_text, prior, tracking_uri):
    """The labels of split-learning clients' rows (fedv, fedvz, festa) from the gradients their tails returned to the
    server at a local step (or all of them), through the assumed tail: the logits' gradients solved by least squares,
    each row's label their one negative entry (iDLG's rule); the share recovered logged per client."""
    from raysim.attacks.attack_run import attack_run
    from raysim.attacks.split_learning import read_labels, refuse_unless_split_learning

    if step_text == "all":
        steps = None
    elif step_text.isdigit() and int(step_text) > 0:
        steps = [int(step_text)]
    else:
        raise ConfigError(f"--step {step_text!r} is neither a local step (1, 2, ...) nor all")
    uri, chosen, captured = replayed(run_id, round_number, clients, tracking_uri, refuse_unless_split_learning)
    readings = [read_labels(captured, client, steps, prior) for client in chosen or [min(captured.updates)]]
    for reading in readings:
        hits = sum(a == b for a, b in zip(reading.labels, reading.true_labels))
        where = f"step {reading.steps[0]}" if steps else f"its {len(reading.steps)} steps"
        click.echo(
            f"client {reading.client}: {hits} of {len(reading.labels)} labels of {where} recovered (fit residual "
            f"{reading.residual:.1e}), {reading.seconds:.1f} s"
        )
    clients_read = ",".join(str(r.client) for r in readings)
    given = {"round": round_number, "clients": clients_read, "step": step_text, "prior": prior}
    with attack_run(uri, run_id, "label-leakage", given) as tracker:
        for reading in readings:
            metrics = {"label_accuracy": reading.accuracy, "residual": reading.residual, "seconds": reading.seconds}
            tracker.log_metrics(metrics, step=reading.client)
        click.echo(f"attack run {tracker.run_id}, nested under {run_id}")
