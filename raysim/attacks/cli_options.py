"""What every ``raysim attack`` command shares: the attacked run, its store, its round and a list of client ids, and
the replay of that run to the attacked round."""

from __future__ import annotations

import click

from raysim.base.errors import ConfigError
from raysim.config import TrackingConfig

ROUND = click.option("--round", "round_number", type=int, default=1, show_default=True, help="The attacked round.")
RUN = click.option("--run", "run_id", required=True, metavar="RUN_ID", help="The attacked run's MLflow id.")
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
    return ids


def replayed(run_id: str, round_number: int, clients: str | None, tracking_uri, refuse) -> tuple:
    """(store URI, chosen clients or None, the capture of round ``round_number``) of run ``run_id``, after
    ``refuse(config)``, which raises for a run the attack does not apply to."""
    from raysim.attacks.capture import capture
    from raysim.attacks.recorded import recorded_config

    chosen = client_ids(clients)
    uri = TrackingConfig(tracking_uri=tracking_uri).resolved_uri
    config = recorded_config(uri, run_id)
    refuse(config)
    return uri, chosen, capture(config, round_number, chosen)
