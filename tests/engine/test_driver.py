"""What the driver logs at the end of a run, against the run's own metrics."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from raysim.engine.driver import run
from raysim.testing.smoke import smoke_config

TYPED_WITH_UNSEEN = {  # on the tests' tiny setting: 9 clients of the synthetic data's domains, 3 held out
    "federation": {"clients": 9, "rounds": 1, "seed": 3, "unseen_fraction": 0.34},
    "data": {"partition": "domains"},
    "checkpoint": {"every": 0},
}


def test_the_per_type_table_rests_on_the_clients_sigma_type_rests_on(tracking_uri):
    """Held-out clients are evaluated (unseen_acc) but are no type's member in sigma_type; the table of accuracy per
    client type takes the same clients, so its means' spread is the run's final sigma_type."""
    config = smoke_config("fedvpt", TYPED_WITH_UNSEEN, {"tracking": {"tracking_uri": tracking_uri}})
    result = run(config, show_progress=False, console=Console(file=io.StringIO()))
    client = MlflowClient(tracking_uri)
    table = json.loads(Path(client.download_artifacts(result.run_id, "type_accuracy.json")).read_text())
    seen = len(result.client_acc) - config.federation.unseen_clients
    assert config.federation.unseen_clients == 3 and sum(row["clients"] for row in table.values()) == seen
    spread = float(np.std([row["mean_acc"] for row in table.values()]))
    assert spread == pytest.approx(result.history[-1]["sigma_type"])
