"""What every ``raysim attack`` command shares: the attacked run, its store, its round and a list of client ids, the
replay of that run to the attacked round, and the reconstruction attacks' reporting."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from statistics import mean

import click

from raysim.base.command_group import given_on_command_line
from raysim.base.errors import ConfigError
from raysim.config import TrackingConfig


class FiniteRange(click.FloatRange):
    """click's FloatRange that also refuses nan and inf (NaN passes every comparison with a bound)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


AT_LEAST_ONE = click.IntRange(min=1)  # an option's value type: click refuses others in one line, with exit code 2
AT_LEAST_ZERO = click.IntRange(min=0)
NON_NEGATIVE = FiniteRange(min=0)
POSITIVE = FiniteRange(min=0, min_open=True)
SEED = click.IntRange(0, 2**63 - 1)

ROUND = click.option("--round", "round_number", type=int, default=1, show_default=True, help="The attacked round.")
RUN = click.option("--run", "run_id", required=True, metavar="RUN_ID", help="The attacked run's MLflow id.")
CLIENTS = click.option(
    "--clients",
    metavar="IDS",
    help="Comma-separated clients whose updates to attack (default: the round's first client the server kept).",
)
TRACKING_URI = click.option(
    "--tracking-uri", help="The run's MLflow store (default sqlite:///./raysim-runs/mlflow.db)."
)


def client_ids(text: str | None) -> list[int] | None:
    """``--clients 0,3,7`` as ids; None when not given."""
    if text is None:
        return None
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(
            f"--clients {text!r} is not a comma-separated list of client ids, e.g. --clients 0,3"
        ) from None
    if any(i < 0 for i in ids):
        raise ConfigError(f"--clients {text!r} names a negative client id")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ConfigError(f"--clients {text!r} names client {twice[0]} twice; name each client once")
    return ids


def refuse_unused(options: tuple[str, ...], because: str) -> None:
    """One line for any of ``options`` (parameter names) given on the command line that the command's other
    options make do nothing: ``because`` says why and what to pass instead."""
    given = given_on_command_line(options)
    if given:
        raise ConfigError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} nothing {because}")


def check_client_range(ids: list[int] | None, clients: int) -> None:
    """One line for a client id the run does not have (before any replay: on the offline default it takes minutes)."""
    unknown = [i for i in ids or [] if i >= clients]
    if unknown:
        raise ConfigError(f"--clients names client {unknown[0]}, and the run has clients 0 to {clients - 1}")


def replayed(run_id: str, round_number: int, clients: str | None, tracking_uri, refuse) -> tuple:
    """(store URI, chosen clients or None, the capture of round ``round_number``) of run ``run_id``, after
    ``refuse(config)``, which raises for a run the attack does not apply to."""
    from raysim.attacks.capture import capture, refuse_uncapturable
    from raysim.attacks.recorded import recorded_config
    from raysim.tracking.mlflow import rounds_reported

    chosen = client_ids(clients)
    uri = TrackingConfig(tracking_uri=tracking_uri).resolved_uri
    config = recorded_config(uri, run_id)
    refuse(config)
    check_client_range(chosen, config.federation.clients)
    refuse_uncapturable(config, round_number)
    rounds, reported = config.federation.rounds, rounds_reported(uri, run_id)
    if round_number > reported:  # a run stopped early (killed, failed, still running)
        raise ConfigError(
            f"run {run_id} reported {reported} of its {rounds} rounds, so its server received no round {round_number}; "
            + (f"pass --round 1 to {reported}" if reported else "attack a run that finished a round")
        )
    return uri, chosen, capture(config, round_number, chosen)


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
