"""A run tracked through a real MLflow tracking server (``--tracking-uri http://...``, what a cluster uses):
params, per-round metrics and artifacts all go over HTTP, and are read back through the server.

The server listens on 127.0.0.1 only, on a free port, with a SQLite backend and proxied artifacts in the
test's temporary folder; nothing else is reached.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from raysim.cli import main

HOST = "127.0.0.1"
START_TIMEOUT_S = 90  # ~20 s on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (it has its own session), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@pytest.fixture
def mlflow_server(tmp_path):
    """``mlflow server`` on 127.0.0.1:PORT (one worker, SQLite store, artifacts served by the server from
    tmp_path/artifacts); yields (url, process, artifacts folder), and stops the server's process group."""
    port = free_port()
    artifacts = tmp_path / "artifacts"
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--serve-artifacts",
        "--artifacts-destination",
        str(artifacts),
    ]
    # No job runner (a second Python process, for MLflow's GenAI jobs): it doubles the start-up time on 2 cores.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - the server writes to it until the fixture ends
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not healthy(url):
            assert process.poll() is None, "mlflow server exited:\n" + (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (
                f"mlflow server not healthy within {START_TIMEOUT_S} s:\n"
                + (tmp_path / "server.log").read_text()[-3000:]
            )
            time.sleep(0.5)
        yield url, process, artifacts
    finally:
        stop(process)
        log.close()


def listening_sockets(port: int) -> dict[int, str]:
    """inode -> local address of every TCP socket listening on ``port`` (Linux /proc/net/tcp and tcp6)."""
    found = {}
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, local_port = fields[1].split(":")
            if fields[3] != "0A" or int(local_port, 16) != port:  # 0A = LISTEN
                continue
            raw = bytes.fromhex(address)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order 32-bit words
            found[int(fields[9])] = socket.inet_ntop(family, raw)
    return found


def session_socket_inodes(session: int) -> set[int]:
    """Inodes of the sockets held by the processes of ``session`` (the server and its workers)."""
    inodes = set()
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) != session:
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(int(target[len("socket:[") : -1]))
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
    return inodes


def test_run_is_tracked_through_an_mlflow_server(ray_session, mlflow_server, tmp_path, monkeypatch):
    url, server, artifacts = mlflow_server
    port = int(url.rsplit(":", 1)[1])
    listening = listening_sockets(port)
    assert listening and set(listening) <= session_socket_inodes(server.pid), listening  # the server's own
    assert set(listening.values()) == {HOST}, listening  # loopback only: no 0.0.0.0, ::, or the host's address

    monkeypatch.chdir(tmp_path)  # an http store keeps checkpoints under ./raysim-runs unless told otherwise
    checkpoints = tmp_path / "checkpoints"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "fedvpt",
            "--preset",
            "quick",
            "--no-progress",
            "--backend",
            "sequential",
            "--set",
            "fedvpt.prompt_length=2",
            "--set",
            f"checkpoint.dir={checkpoints}",
            "--tracking-uri",
            url,
            "--experiment",
            "server-e2e",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "global_acc" in result.output

    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("server-e2e")
    assert experiment is not None and experiment.artifact_location.startswith("mlflow-artifacts:")
    (run,) = client.search_runs([experiment.experiment_id])
    run_id = run.info.run_id
    assert run.info.status == "FINISHED"
    assert run.data.params["federation.clients"] == "20" and run.data.params["fedvpt.prompt_length"] == "2"
    assert run.data.params["resources.backend"] == "sequential"
    assert run.data.tags["method"] == "fedvpt" and run.data.tags["backend"] == "sequential"
    history = client.get_metric_history(run_id, "global_acc")
    assert [m.step for m in history] == [1, 2, 3]
    assert all(0.0 <= m.value <= 100.0 for m in history)
    for key in ("local_acc", "bytes_up", "round_time_s", "summary.global_acc.mean"):
        assert key in run.data.metrics, key

    # the REST API itself (what any client of the server sees)
    with urllib.request.urlopen(f"{url}/api/2.0/mlflow/runs/get?run_id={run_id}", timeout=10) as response:
        rest = json.load(response)["run"]
    assert rest["info"]["status"] == "FINISHED"
    assert {"key": "federation.clients", "value": "20"} in rest["data"]["params"]

    # artifacts: listed and downloaded through the server, stored in its artifacts destination
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {
        "config.yaml",
        "summary.json",
        "partition_summary.json",
        "partition.png",
        "accuracy_curves.png",
        "client_accuracy.png",
        "global_state.safetensors",
    } <= names, names
    local = Path(client.download_artifacts(run_id, "summary.json", str(tmp_path / "download")))
    summary = json.loads(local.read_text())
    assert summary["run_id"] == run_id and summary["final"]["global_acc"] == pytest.approx(history[-1].value)
    config_yaml = Path(client.download_artifacts(run_id, "config.yaml", str(tmp_path / "download"))).read_text()
    assert "prompt_length: 2" in config_yaml
    stored = {p.name for p in artifacts.rglob("*") if p.is_file()}
    assert {"config.yaml", "summary.json", "global_state.safetensors"} <= stored, stored

    # the checkpoints went where asked, not into the working directory
    assert (checkpoints / run_id).is_dir() and not (tmp_path / "raysim-runs").exists()
    assert server.poll() is None  # still serving after the run
