"""A run tracked through a real MLflow tracking server (``--tracking-uri http://...``, what a cluster uses):
params, tags, the data set, per-round metrics and artifacts all go over HTTP, and are read back through the server;
and ``raysim ui``, which starts such a server over a store and prints the URL of an experiment's runs table.

The server listens on 127.0.0.1 only, on a free port, with a SQLite backend and proxied artifacts in the
test's temporary folder; nothing else is reached.
"""

from __future__ import annotations

import json
import os
import select
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
from raysim.tracking import checkpoint as ckpt
from raysim.tracking.mlflow import Tracker
from raysim.tracking.ui import healthy, stop

HOST = "127.0.0.1"
START_TIMEOUT_S = 90  # ~20 s on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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
            "fgpt",
            "--preset",
            "quick",
            "--no-progress",
            "--backend",
            "sequential",
            "--set",
            "fgpt.groups=3",
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
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # classic ML, not GenAI
    (run,) = client.search_runs([experiment.experiment_id])
    run_id = run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name.endswith("-s0-synthetic-dirichlet1-20c")
    assert run.data.params["federation.clients"] == "20" and run.data.params["fgpt.groups"] == "3"
    assert run.data.params["resources.backend"] == "sequential"
    assert run.data.tags["method"] == "fgpt" and run.data.tags["backend"] == "sequential"
    history = client.get_metric_history(run_id, "global_acc")
    assert [m.step for m in history] == [1, 2, 3]
    recorded = ckpt.load(Path(checkpoints) / run_id, clients=False, tensors=False).history  # the run's own record
    assert [m.value for m in history] == [entry["global_acc"] for entry in recorded]
    for key in ("local_acc", "bytes_up", "bytes_up_total", "round_time_s", "summary/global_acc_mean"):
        assert key in run.data.metrics, key

    # the REST API itself (what any client of the server sees): resolved params, provenance, the data set
    with urllib.request.urlopen(f"{url}/api/2.0/mlflow/runs/get?run_id={run_id}", timeout=10) as response:
        rest = json.load(response)["run"]
    assert rest["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in rest["data"]["params"]}
    tags = {t["key"]: t["value"] for t in rest["data"]["tags"]}
    assert params["federation.clients"] == "20"
    # FGPT's block and query layer as built on the nano backbone (4 blocks), not -1 / 0; the run's own name and pool
    assert params["fgpt.group_block"] == "2" and params["fgpt.select_layer"] == "4"
    assert params["tracking.run_name"] == run.info.run_name and params["resources.workers"] == "1"
    assert params["tracking.tracking_uri"] == url and params["checkpoint.dir"] == str(checkpoints)
    assert tags["family"] == "group prompts" and tags["mlflow.note.content"].startswith("fgpt (group prompts) on")
    for key in ("mlflow.source.name", "mlflow.user", "version.raysim", "version.torch", "hardware.cpu", "precision"):
        assert tags[key], key
    (dataset,) = rest["inputs"]["dataset_inputs"]
    assert dataset["dataset"]["name"] == "synthetic" and len(dataset["dataset"]["digest"]) == 8

    # artifacts: listed and downloaded through the server, stored in its artifacts destination
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {
        "config.yaml",
        "summary.json",
        "partition_summary.json",
        "partition_counts.safetensors",
        "partition.png",
        "accuracy_curves.png",
        "client_accuracy.png",
        "global_state.safetensors",
        "participation.safetensors",
    } <= names, names
    local = Path(client.download_artifacts(run_id, "summary.json", str(tmp_path / "download")))
    summary = json.loads(local.read_text())
    assert summary["run_id"] == run_id and summary["final"]["global_acc"] == pytest.approx(history[-1].value)
    config_yaml = Path(client.download_artifacts(run_id, "config.yaml", str(tmp_path / "download"))).read_text()
    assert "group_block: 2" in config_yaml and "workers: 1" in config_yaml  # what the run used
    stored = {p.name for p in artifacts.rglob("*") if p.is_file()}
    assert {"config.yaml", "summary.json", "global_state.safetensors"} <= stored, stored

    # the checkpoints went where asked, not into the working directory
    assert (checkpoints / run_id).is_dir() and not (tmp_path / "raysim-runs").exists()
    assert server.poll() is None  # still serving after the run

    # an experiment deleted on the server is refused in one line before the data are read, as in a SQLite store
    client.delete_experiment(client.create_experiment("gone"))
    gone = CliRunner().invoke(main, ["run", "fedavg", "--experiment", "gone", "--tracking-uri", url])
    assert gone.exit_code == 2 and len(gone.stderr.strip().splitlines()) == 1, gone.stderr
    assert "experiment 'gone' is deleted in the MLflow store" in gone.stderr


def read_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The next line ``process`` prints to stdout, waiting at most ``timeout_s``."""
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, (
        f"nothing printed in {timeout_s} s; stderr: {process.stderr.read() if process.poll() is not None else ''}"
    )
    return process.stdout.readline().strip()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP (terminal closed)"])
def test_raysim_ui_serves_the_store_on_loopback_and_prints_the_runs_table_url(tmp_path, stop):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = Tracker(uri).experiment_id("cmp")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "raysim.cli",
        "ui",
        "--tracking-uri",
        uri,
        "--experiment",
        "cmp",
        "--port",
        str(port),
    ]
    ui = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        url = read_line(ui, START_TIMEOUT_S)
        base = f"http://{HOST}:{port}"
        assert url == f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"  # not the GenAI pages
        assert healthy(base)
        listening = listening_sockets(port)
        assert listening and set(listening.values()) == {HOST}, listening  # loopback only
        with urllib.request.urlopen(base + "/", timeout=10) as response:
            assert "MLflow" in response.read().decode()
        query = f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=cmp"
        with urllib.request.urlopen(query, timeout=10) as response:
            tags = {t["key"]: t["value"] for t in json.load(response)["experiment"]["tags"]}
        assert tags["mlflow.experimentKind"] == "custom_model_development"
    finally:
        ui.send_signal(stop)  # raysim ui stops its server on the way out
        ui.wait(timeout=30)
    assert not listening_sockets(port), "the MLflow server outlived raysim ui"
    assert (tmp_path / "mlflow-ui.log").is_file()


def test_raysim_ui_bad_input_is_one_line_exit_2(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    missing = CliRunner().invoke(main, ["ui", "--tracking-uri", f"sqlite:///{tmp_path}/none/mlflow.db"])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr and not (tmp_path / "none").exists()
    MlflowClient(uri).create_experiment("cmp")  # as raysim logged experiments before it marked them classic ML
    unknown = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--experiment", "nope"])
    assert unknown.exit_code == 2 and "no experiment 'nope'" in unknown.stderr and "cmp" in unknown.stderr
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--experiment", "cmp", "--port", str(port)])
    assert busy.exit_code == 2 and f"cannot listen on {HOST}:{port}" in busy.stderr and "pass --port" in busy.stderr
    elsewhere = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--experiment", "cmp", "--host", "192.0.2.1"])
    assert elsewhere.exit_code == 2 and "pass --host with an address of this machine" in elsewhere.stderr
    unset = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--experiment", "cmp", "--host", ""])
    assert unset.exit_code == 2 and "--host '' is empty" in unset.stderr  # "" would listen on every interface
    for port in ("70000", "0", "-5"):  # no port, and none a socket can bind
        out_of_range = CliRunner().invoke(main, ["ui", "--tracking-uri", uri, "--port", port])
        assert out_of_range.exit_code == 2 and "is not in the range 1<=x<=65535" in out_of_range.stderr
    assert MlflowClient(uri).get_experiment_by_name("cmp").tags["mlflow.experimentKind"] == "custom_model_development"
    for result in (missing, unknown, busy, elsewhere, unset):
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("raysim: error: ")
