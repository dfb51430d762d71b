"""``raysim ui``: MLflow's UI over raysim's run store, opened on an experiment's runs table.

MLflow 3 opens on its GenAI pages (traces); ``?workflowType=machine_learning`` in the URL opens the classic runs
table, where runs are compared (every raysim experiment also carries the ``mlflow.experimentKind`` tag that says so
to MLflow builds that read it). The server listens on 127.0.0.1 unless told otherwise; its log goes to a file beside
the store, so the terminal shows the URL.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from raysim.base.errors import ConfigError
from raysim.config import beside_store
from raysim.tracking.mlflow import (
    EXPERIMENT_KIND,
    MACHINE_LEARNING,
    check_run_store,
    check_store,
    live_experiment,
    store_client,
)

START_TIMEOUT_S = 120  # ~10-20 s on a busy 2-core machine
LOG_NAME = "mlflow-ui.log"
WILDCARDS = ("0.0.0.0", "::")


def runs_url(base: str, experiment_id: str) -> str:
    """The URL of an experiment's runs table in MLflow's classic machine-learning view."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def base_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a server listening on ``host``."""
    host = "127.0.0.1" if host in WILDCARDS else host
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def experiment_id(uri: str, name: str) -> str:
    """The id of experiment ``name`` in the store ``uri``, marked classic ML if it is not yet (one logged before
    raysim marked them); the error lists the experiments there."""
    client = store_client(uri)
    found = live_experiment(client, uri, name)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise ConfigError(
            f"no experiment {name!r} in {uri}; pass --experiment with one of: {', '.join(names) or 'none'}"
        )
    if EXPERIMENT_KIND not in found.tags:
        client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, MACHINE_LEARNING)
    return found.experiment_id


def check_port(host: str, port: int) -> None:
    """Fail with one line when nothing can listen on ``host:port`` (taken, or not an address of this machine)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.bind((host, port))
    except OSError as error:
        elsewhere = isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL  # no such address here
        fix = "pass --host with an address of this machine" if elsewhere else "pass --port with a free port"
        raise ConfigError(f"cannot listen on {host}:{port} ({error.strerror or error}); {fix}") from None


def server_command(uri: str, host: str, port: int) -> list[str]:
    """``mlflow server`` over the store ``uri`` (one worker: a single user's UI), serving a SQLite store's
    artifacts from the folder raysim writes them to."""
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri]
    command += ["--host", host, "--port", str(port), "--workers", "1"]
    if uri.startswith("sqlite:///"):
        command += ["--artifacts-destination", str(beside_store(uri) / "artifacts")]
    return command


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def show(url: str) -> None:
    print(url, flush=True)  # stdout, alone on its line: what a script reads


def serve(uri: str, experiment: str, host: str, port: int) -> int:
    """Show ``experiment`` of the store ``uri`` in MLflow's UI: print the URL of its runs table and, unless the
    store is itself a server, run ``mlflow server`` on ``host:port`` until it exits or Ctrl-C stops it; returns
    the server's exit status (0 for a store that is a server)."""
    if uri.startswith(("http://", "https://")):
        check_store(uri)
        show(runs_url(uri, experiment_id(uri, experiment)))
        return 0
    check_run_store(uri)
    found = experiment_id(uri, experiment)
    check_port(host, port)
    log_path = beside_store(uri) / LOG_NAME
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}  # no GenAI job runner: a faster start
    url = base_url(host, port)
    for stopping in (signal.SIGTERM, signal.SIGHUP):  # a closed terminal too: stop the server on the way out
        signal.signal(stopping, lambda signum, frame: sys.exit(128 + signum))
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            server_command(uri, host, port), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not healthy(url):
                if process.poll() is not None:
                    raise ConfigError(f"mlflow server stopped ({_last_line(log_path)}); its log: {log_path}")
                if time.monotonic() > deadline:
                    raise ConfigError(f"mlflow server did not answer within {START_TIMEOUT_S} s; its log: {log_path}")
                time.sleep(0.5)
            show(runs_url(url, found))
            print(f"MLflow UI on {url} over {uri} (log: {log_path}); Ctrl-C stops it", file=sys.stderr, flush=True)
            return process.wait()
        finally:
            stop(process)
