"""Shared fixtures: one local Ray session per test worker (ray.init costs ~4 s on 2 cores; pytest-xdist runs two
workers, each taking whole test files, the long ones first, as ``addopts`` says: ``-n 0`` runs in one process), and
the test matrix's options: ``--precision fp32|bf16`` decides every ``train.precision=auto`` and ``--torch-threads N``
every worker's torch threads, for this process and every process it starts (through the environment raysim
reads)."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from raysim.base.precision import AUTO_ENV
from raysim.engine.setup import THREADS_ENV


def pytest_addoption(parser):
    parser.addoption("--precision", choices=("fp32", "bf16"), help=f"what train.precision=auto becomes (${AUTO_ENV})")
    parser.addoption("--torch-threads", type=int, help=f"torch threads per client worker (${THREADS_ENV})")


LONGEST_FIRST = (  # files whose tests take over 40 s (``pytest --durations=0``, summed per file), longest first
    "tests/algorithms/test_methods.py",
    "tests/e2e/test_interrupt.py",
    "tests/e2e/test_compare.py",
    "tests/engine/test_executors.py",
    "tests/e2e/test_foreign_ray.py",
    "tests/tracking/test_resume.py",
    "tests/engine/test_row_features.py",
    "tests/actors/test_failures.py",
    "tests/e2e/test_cli.py",
    "tests/engine/test_screening.py",
    "tests/privacy/test_private_runs.py",
    "tests/algorithms/test_fedv.py",
    "tests/data/test_glyphs.py",
    "tests/engine/test_cohort.py",
    "tests/e2e/test_tune.py",
)


def pytest_collection_modifyitems(config, items):
    """The long files first, the others as collected: the workers take whole files in this order
    (``--no-loadscope-reorder``), so the run ends on short files with every worker busy, not on one long file."""
    missing = [path for path in LONGEST_FIRST if not (config.rootpath / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py's LONGEST_FIRST names files that do not exist: {missing}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_configure(config):
    for option, variable in (("precision", AUTO_ENV), ("torch_threads", THREADS_ENV)):
        value = config.getoption(option)
        if value is not None:
            os.environ[variable] = str(value)
    # every Ray the suite starts (its sessions, clusters, `ray start`, raysim's own) authenticates with a token of
    # this session's, as raysim's local Ray does by default with the user's ~/.ray/auth_token
    if "RAY_AUTH_TOKEN_PATH" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="raysim-tests-token-"))
        (folder / "auth_token").write_text(secrets.token_hex(32))
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(folder / "auth_token")
        config.token_folder = folder  # removed by the process that made it, at its end


def pytest_unconfigure(config):
    if hasattr(config, "token_folder"):
        shutil.rmtree(config.token_folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Generated datasets go to a per-session cache, never the user's ~/.cache/raysim; a data set that would fetch
    itself asks a closed local port (the offline error at once), never the internet."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RAYSIM_CACHE", str(tmp_path_factory.mktemp("raysim-cache")))
    mp.setenv("RAYSIM_DATA_MIRROR", "http://127.0.0.1:9")
    yield
    mp.undo()


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs and 2 logical GPUs (Ray can declare GPUs on a CPU machine)."""
    import ray

    if not ray.is_initialized():
        ray.init(  # the tests' own, whatever other Ray runs on the machine (a test starts one with `ray start`)
            address="local",
            num_cpus=2,
            num_gpus=2,
            include_dashboard=False,
            logging_level=logging.WARNING,
            configure_logging=True,
        )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """An MLflow SQLite store with its tables created: MLflow's migrations take about 1 s a store, so every test's
    store is a copy of this one."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("empty-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tracking_uri(tmp_path, empty_store):
    """A fresh SQLite MLflow store per test (a copy of ``empty_store``); tests that check a command writes nothing
    name a path where no store exists instead."""
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
