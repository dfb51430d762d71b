"""The options every ``raysim attack`` command shares: the attacked run, its store, and a list of client ids."""

from __future__ import annotations

import click

from raysim.base.errors import ConfigError

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
