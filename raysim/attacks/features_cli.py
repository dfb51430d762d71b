"""``raysim attack features``: what FedGCR's feature means reveal, read off the nearest public rows and, with
``--prototype``, from the image reconstructed from each mean (:mod:`raysim.attacks.prototype`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from statistics import mean

import click

from raysim.attacks.cli_options import (
    AT_LEAST_ONE,
    NON_NEGATIVE,
    POSITIVE,
    ROUND,
    RUN,
    TRACKING_URI,
    refuse_unused,
    replayed,
)


@click.command(context_settings={"max_content_width": 100})
@RUN
@ROUND
@click.option(
    "--clients", metavar="IDS", help="Comma-separated clients to attack (default: every one the server heard from)."
)
@click.option("--k", type=AT_LEAST_ONE, default=10, show_default=True, help="How many nearest public rows are read.")
@click.option(
    "--prototype", is_flag=True, help="Also reconstruct the image whose feature is each mean, and read its type."
)
@click.option(
    "--iterations", type=AT_LEAST_ONE, default=500, show_default=True, help="The prototype search's Adam steps."
)
@click.option(
    "--tv", type=NON_NEGATIVE, default=1e-4, show_default=True, help="The prototype's total-variation weight."
)
@click.option("--lr", type=POSITIVE, default=0.1, show_default=True, help="The prototype search's first step.")
@TRACKING_URI
def features(run_id, round_number, clients, k, prototype, iterations, tv, lr, tracking_uri):
    """What FedGCR's feature means (h_tilde, FedGCR Eq. 4) reveal: each client's type and classes read off the k
    public rows nearest to it (the test rows of every other client), beside an attacker that received nothing; with
    --prototype, also the type shown by the image reconstructed from the mean."""
    from raysim.attacks.attack_run import attack_run
    from raysim.attacks.harness import read_feature_means, refuse_unless_feature_means
    from raysim.attacks.smashed import SmashedSettings

    if not prototype:
        refuse_unused(("iterations", "tv", "lr"), "without --prototype (they set its search); add --prototype")
    uri, chosen, captured = replayed(run_id, round_number, clients, tracking_uri, refuse_unless_feature_means)
    targets = chosen or sorted(captured.updates)
    readings = read_feature_means(captured, targets, k)
    found = [r.inference for r in readings]
    summary = {
        "type_accuracy": mean(float(r.type_recovered) for r in found),
        "baseline_type_accuracy": mean(float(r.baseline_recovered) for r in found),
        "label_precision_mean": mean(r.label_precision for r in found),
        "label_base_rate_mean": mean(r.label_base_rate for r in found),
    }
    prototypes = []
    if prototype:
        from raysim.attacks.prototype import prototypes as reconstruct

        prototypes = reconstruct(captured, targets, SmashedSettings(iterations, lr, tv))
        summary["prototype_type_accuracy"] = mean(float(p.type_recovered) for p in prototypes)
    given = {"round": round_number, "clients": ",".join(map(str, targets)), "k": k}
    if prototype:
        given.update(prototype=True, iterations=iterations, tv=tv, lr=lr)
    with attack_run(uri, run_id, "features", given) as tracker:
        for r in found:
            tracker.log_metrics(
                {
                    "type_recovered": float(r.type_recovered),
                    "baseline_type_recovered": float(r.baseline_recovered),
                    "label_precision": r.label_precision,
                    "label_base_rate": r.label_base_rate,
                },
                step=r.client,
            )
        for p in prototypes:
            tracker.log_metrics({"prototype_type_recovered": float(p.type_recovered), "seconds": p.seconds}, p.client)
        tracker.log_metrics(summary, step=0)
        with tempfile.TemporaryDirectory() as folder:
            for path in pictures(captured, readings, prototypes, k, Path(folder)):
                tracker.log_artifact(path)
        shown = f"; the prototype shows it for {summary['prototype_type_accuracy']:.0%}" if prototype else ""
        click.echo(
            f"features, round {round_number}, {len(readings)} clients: type recovered for "
            f"{summary['type_accuracy']:.0%} (sending nothing: {summary['baseline_type_accuracy']:.0%}){shown}; label "
            f"precision of the {k} nearest {summary['label_precision_mean']:.2f} (base rate "
            f"{summary['label_base_rate_mean']:.2f}); attack run {tracker.run_id}, nested under {run_id}"
        )


def pictures(captured, readings, prototypes, k: int, folder: Path) -> list[Path]:
    """Per client: its rows above the nearest public rows; with a prototype, its rows above the prototype and every
    type's mean public image."""
    from raysim.attacks.figures import reconstruction_grid
    from raysim.attacks.scores import row_pixels

    paths = []
    for reading in readings:
        client = reading.inference.client
        own = row_pixels(captured.shards.train(client).images[:k])
        near = row_pixels(reading.nearest_images[: len(own)])
        paths.append(folder / f"client-{client}.png")
        captions = [f"nearest {i + 1}" for i in range(len(near))]
        reconstruction_grid(own, near, captions, paths[-1], ("the client's rows", "nearest public"))
    for p in prototypes:
        shown = [p.image, *p.type_means.values()]
        own = row_pixels(captured.shards.train(p.client).images[: len(shown)])
        if len(own) < len(shown):
            continue  # a client with fewer rows than types: the picture needs one above each
        captions = [f"prototype: type {p.guessed_type}", *(f"type {t} mean" for t in p.type_means)]
        paths.append(folder / f"prototype-client-{p.client}.png")
        reconstruction_grid(own, shown, captions, paths[-1], ("the client's rows", "prototype, type means"))
    return paths
