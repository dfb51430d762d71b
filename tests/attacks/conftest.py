"""The attacks' recorded runs: a method's smoke run, tracked in a store of its own with its checkpoints beside it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from raysim.engine.driver import run
from raysim.testing.smoke import smoke_config


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, empty_store):
    """``tracked_run(method, *layers) -> (tracking URI, run id)``: ``method``'s smoke config with ``layers`` on top,
    run to its end in a fresh copy of the empty store (checkpoints under its folder, the newest kept)."""

    def tracked(method: str, *layers: dict) -> tuple[str, str]:
        folder = tmp_path_factory.mktemp(method)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        (folder / "mlflow.db").write_bytes(empty_store.read_bytes())
        where = {"tracking": {"tracking_uri": uri}, "checkpoint": {"dir": str(folder / "checkpoints"), "keep": 1}}
        result = run(smoke_config(method, *layers, where), show_progress=False, console=Console(file=io.StringIO()))
        return uri, result.run_id

    return tracked
