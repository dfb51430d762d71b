"""Shared fixtures: one local Ray session for the whole test run (ray.init costs ~4 s on 2 cores)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Generated datasets go to a per-session cache, never the user's ~/.cache/raysim."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RAYSIM_CACHE", str(tmp_path_factory.mktemp("raysim-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs and 2 logical GPUs (Ray can declare GPUs on a CPU machine)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level=logging.WARNING, configure_logging=True)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture
def tracking_uri(tmp_path):
    """A fresh SQLite MLflow store per test."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
